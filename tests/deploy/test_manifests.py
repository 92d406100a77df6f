"""The Kubernetes manifests: each overlay renders with ``kubectl kustomize``, every object
validates against the Kubernetes schema, and what the objects say matches what the
services actually read and serve.

Schemas: the built-in kinds against ``kubernetes-validate`` (strict: an unknown field is an
error) for the oldest Kubernetes still commonly run and the one kubectl is pinned to. The
PodMonitor is no built-in kind: tests/deploy/test_podmonitor.py validates it against its
CRD and checks what it scrapes.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
from pydantic_settings import BaseSettings

from corral.local.stack_config import SERVICES
from tests.deploy.dockerfile import lineage, stage
from tests.deploy.render import (
    DEPLOY,
    KUBERNETES_VERSIONS,
    OVERLAYS,
    Obj,
    config_data,
    container_env,
    containers,
    named,
    of_kind,
    render,
    service_of,
    workloads,
)

# Built in or from a CRD; a kind in neither list fails the schema test until it is
# given a schema here.
CRD_KINDS = {("monitoring.coreos.com/v1", "PodMonitor")}
# Created outside the overlay, before it is applied (deploy/README.md says how), and the
# optional alerter configuration. Everything else an object refers to must be rendered.
EXTERNAL = {
    "dev": {"Secret": {"corral-db-app", "corral-alerter-routing"}, "ConfigMap": {"corral-alert-rules"}},
    "production": {
        "Secret": {
            "corral-db-app",
            "corral-admin-token",
            "corral-alerter-routing",
            *(f"corral-nats-{service}" for service in ("api", "scheduler", "launcher", "monitor", "alerter")),
        },
        "ConfigMap": {"corral-alert-rules"},
    },
}
PLACEHOLDERS = {  # stand-ins for what the kubelet fills in, to build the settings
    "spec.nodeName": "gpu-node-7",
    "status.podIP": "10.1.2.3",
    "metadata.namespace": "corral",
}


def all_objects() -> Iterator[tuple[str, Obj]]:
    for overlay in OVERLAYS:
        for obj in render(overlay):
            yield overlay, obj


# --- rendering and schemas ------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders(overlay: str) -> None:
    objects = render(overlay)
    kinds = {obj["kind"] for obj in objects}
    assert {"Deployment", "DaemonSet", "PodDisruptionBudget", "Role", "RoleBinding", "ConfigMap"} <= kinds
    # Every object lands in Corral's namespace (the Namespace itself aside).
    assert {obj["metadata"].get("namespace") for obj in objects if obj["kind"] != "Namespace"} == {"corral"}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_matches_the_kubernetes_schema(overlay: str, version: str) -> None:
    checked = 0
    for obj in render(overlay):
        if (obj["apiVersion"], obj["kind"]) in CRD_KINDS:
            continue  # test_podmonitor_matches_its_crd
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            pytest.fail(f"{obj['apiVersion']} {obj['kind']} is not a Kubernetes {version} kind")
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(p) for p in error.path)
            pytest.fail(f"{overlay}: {obj['kind']} {obj['metadata']['name']} at {where}: {error.message}")
        checked += 1
    assert checked >= 15


# --- every service, run by name, probed where it listens ------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_runs_from_the_one_image_by_name(overlay: str) -> None:
    objects = render(overlay)
    names = {name for name, _ in SERVICES}
    images = set()
    ran = []
    for obj in workloads(objects):
        for container in containers(obj):
            assert "command" not in container, "args only: the image's entrypoint (and Tilt's wrapper) stay"
            assert service_of(container) in names
            ran.append(service_of(container))
            images.add(container["image"])
    assert len(images) == 1
    expected = names if overlay == "dev" else names - {"agent"}
    assert sorted(ran) == sorted(expected)


def probe_port(container: Obj, probe: Obj) -> int:
    port = probe["httpGet"]["port"]
    if isinstance(port, int):
        return port
    (declared,) = [p for p in container.get("ports", []) if p["name"] == port]
    return int(declared["containerPort"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_hit_the_health_endpoints_where_the_service_listens(overlay: str) -> None:
    objects = render(overlay)
    for obj in workloads(objects):
        for container in containers(obj):
            env = container_env(objects, container)
            what = f"{overlay} {obj['metadata']['name']}/{container['name']}"
            # The API serves /healthz and /readyz on its own port; the others on the
            # health port (shared/service.py), bound beyond loopback for the kubelet.
            prefix = "CORRAL_API_" if service_of(container) == "api" else "CORRAL_HEALTH_"
            assert env[prefix + "HOST"] == {"value": "0.0.0.0"}, what
            port = int(env[prefix + "PORT"]["value"])
            for kind, path in (
                ("startupProbe", "/healthz"),
                ("livenessProbe", "/healthz"),
                ("readinessProbe", "/readyz"),
            ):
                probe = container.get(kind)
                assert probe is not None, f"{what} has no {kind}"
                assert probe["httpGet"]["path"] == path, what
                assert probe_port(container, probe) == port, f"{what}: {kind} is not on port {port}"
        ports = [p["containerPort"] for c in containers(obj) for p in c.get("ports", [])]
        assert len(ports) == len(set(ports)), f"containers of one pod share its ports: {ports}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_requests_cpu_and_memory(overlay: str) -> None:
    for obj in workloads(render(overlay)):
        for container in containers(obj):
            requests = container["resources"]["requests"]
            assert {"cpu", "memory"} <= requests.keys(), f"{obj['metadata']['name']}/{container['name']}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_deployment_has_a_disruption_budget(overlay: str) -> None:
    objects = render(overlay)
    budgets = of_kind(objects, "PodDisruptionBudget")
    for deployment in of_kind(objects, "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert len(covering) == 1, f"{deployment['metadata']['name']}: {len(covering)} budgets"
        spec = covering[0]["spec"]
        # Never one that blocks every drain: at least one pod may always go.
        assert spec.get("maxUnavailable", 0) >= 1 or spec["minAvailable"] < deployment["spec"]["replicas"]


def test_production_runs_standbys() -> None:
    objects = render("production")
    replicas = {d["metadata"]["name"]: d["spec"]["replicas"] for d in of_kind(objects, "Deployment")}
    assert replicas["corral-api"] >= 2
    assert replicas["corral-scheduler"] >= 2  # the advisory-lock leader and a standby
    assert replicas["corral-monitor"] >= 2  # a queue group
    # One lease-holding runner and one alerter, replaced (not overlapped) on rollout.
    for single in ("corral-launcher", "corral-alerter"):
        assert replicas[single] == 1
        assert named(objects, "Deployment", single)["spec"]["strategy"]["type"] == "Recreate"


# --- settings: names the services read, values they accept ---------------------------


def settings_module(service: str) -> Any:
    module = dict(SERVICES)[service]
    try:
        return importlib.import_module(module + ".settings")
    except ModuleNotFoundError:  # the exporter reads the monitor's settings
        return importlib.import_module(module.rsplit(".", 1)[0] + ".settings")


def env_names(settings: type[BaseSettings]) -> set[str]:
    """Every CORRAL_* variable a settings tree reads: each group has its own prefix."""
    names: set[str] = set()
    prefix = settings.model_config.get("env_prefix", "")
    for field_name, field in settings.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseSettings):
            names |= env_names(kind)
        elif prefix:
            names.add((prefix + field_name).upper())
    return names


def read_by(service: str) -> set[str]:
    return env_names(settings_module(service).Settings)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_setting_named_is_one_a_service_reads(overlay: str) -> None:
    objects = render(overlay)
    everything = set().union(*(read_by(name) for name, _ in SERVICES))
    for name in config_data(objects):
        if name.startswith("OTEL_"):
            continue  # the OpenTelemetry SDK's own (shared/telemetry.py; deploy/README.md)
        assert name in everything, f"corral-config sets {name}, which no service reads"
    for obj in workloads(objects):
        for container in containers(obj):
            own = {item["name"] for item in container.get("env", []) if item["name"].startswith("CORRAL_")}
            unread = own - read_by(service_of(container))
            assert not unread, f"{obj['metadata']['name']}/{container['name']} sets {unread}, unread there"


def literal_env(objects: list[Obj], container: Obj) -> dict[str, str]:
    values = {}
    for name, source in container_env(objects, container).items():
        if "value" in source:
            values[name] = str(source["value"])
        elif "fieldRef" in source:
            values[name] = PLACEHOLDERS[source["fieldRef"]["fieldPath"]]
        else:
            values[name] = "postgresql://corral:secret@corral-db-rw:5432/corral"  # a Secret's
    return values


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_settings_are_accepted_by_its_service(
    overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render(overlay)
    for obj in workloads(objects):
        for container in containers(obj):
            for name in [n for n in os.environ if n.startswith("CORRAL_")]:
                monkeypatch.delenv(name)
            env = literal_env(objects, container)
            for name, value in env.items():
                monkeypatch.setenv(name, value)
            settings = settings_module(service_of(container)).Settings()
            common = settings.common
            assert common.database.url.startswith("postgresql://")
            assert common.nats.url == config_data(objects)["CORRAL_NATS_URL"]
            if service_of(container) in ("agent", "exporter"):
                group = settings.agent if service_of(container) == "agent" else settings.exporter
                assert group.node_id == PLACEHOLDERS["spec.nodeName"]  # the Kubernetes node name


def volume_mount(pod: Obj, container: Obj, claim: str) -> Obj:
    """The container's mount of the PersistentVolumeClaim ``claim``."""
    (volume,) = [
        v["name"] for v in pod["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == claim
    ]
    mounts: list[Obj] = [m for m in container["volumeMounts"] if m["name"] == volume]
    assert len(mounts) == 1, f"{container['name']} mounts {claim} {len(mounts)} times"
    return mounts[0]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_launcher_keeps_pod_logs_in_its_log_dir_and_the_api_mounts_none(
    overlay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pods' logs: the launcher appends them under its log dir, on the claim, and answers
    for them over NATS; the API asks for logs and mounts none (it never opens a log)."""
    objects = render(overlay)
    (claim,) = of_kind(objects, "PersistentVolumeClaim")
    name = claim["metadata"]["name"]
    launcher, api = (named(objects, "Deployment", f"corral-{s}") for s in ("launcher", "api"))
    (writer,) = containers(launcher)
    written = volume_mount(launcher["spec"]["template"]["spec"], writer, name)
    assert not written.get("readOnly")
    api_pod = api["spec"]["template"]["spec"]
    assert not [v for v in api_pod["volumes"] if "persistentVolumeClaim" in v]
    # ... and that volume is where the launcher writes: its log dir, with the image's
    # CORRAL_HOME and the container's settings.
    image_env = [e for built in lineage(stage("runtime")) for e in built.all("ENV")]
    (home,) = [m for e in image_env if (m := re.search(r"CORRAL_HOME=(\S+)", e))]
    for variable in [n for n in os.environ if n.startswith("CORRAL_")]:
        monkeypatch.delenv(variable)
    for variable, value in {"CORRAL_HOME": home[1], **literal_env(objects, writer)}.items():
        monkeypatch.setenv(variable, value)
    assert str(settings_module("launcher").Settings().log_dir) == written["mountPath"]
    # One launcher (Recreate) mounts it: no ReadWriteMany needed of the cluster's storage.
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert launcher["spec"]["strategy"]["type"] == "Recreate"


def test_production_settings() -> None:
    config = config_data(render("production"))
    assert config["CORRAL_NATS_STREAM_REPLICAS"] == "3"  # on the three-server NATS
    assert config["CORRAL_EXPORTER_BACKEND"] == "nvml"  # never simulated GPUs on a GPU node
    assert config["CORRAL_LAUNCHER_DRIVER"] == "kubernetes"


# --- the node DaemonSet ---------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_node_pods_take_no_host_namespaces_or_privileges(overlay: str) -> None:
    (daemonset,) = of_kind(render(overlay), "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    for host in ("hostPID", "hostNetwork", "hostIPC"):
        assert not pod.get(host), f"{host} is not needed (node.yaml says why)"
    assert all("hostPath" not in volume for volume in pod.get("volumes", []))


def test_production_runs_the_exporter_on_gpu_nodes_and_tasks_as_pods() -> None:
    objects = render("production")
    (daemonset,) = of_kind(objects, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["runtimeClassName"] == "nvidia"
    assert [service_of(c) for c in pod["containers"]] == ["exporter"]
    # The GPUs are seen through the NVIDIA runtime, none taken from the jobs.
    for container in pod["containers"]:
        assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
        assert container_env(objects, container)["NVIDIA_VISIBLE_DEVICES"] == {"value": "all"}


def test_dev_runs_node_agents_with_simulated_gpus_on_every_node() -> None:
    objects = render("dev")
    (daemonset,) = of_kind(objects, "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod
    assert sorted(service_of(c) for c in pod["containers"]) == ["agent", "exporter"]
    config = config_data(objects)
    assert config["CORRAL_EXPORTER_BACKEND"] == "simulated"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_node_is_run_by_its_agent_or_by_the_launcher_never_both(overlay: str) -> None:
    objects = render(overlay)
    (daemonset,) = of_kind(objects, "DaemonSet")
    has_agent = "agent" in [service_of(c) for c in containers(daemonset)]
    driver = config_data(objects)["CORRAL_LAUNCHER_DRIVER"]
    assert driver == ("local" if has_agent else "kubernetes")


# --- references, credentials, privileges ----------------------------------------------


def references(pod: Obj) -> Iterator[tuple[str, str]]:
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            yield "Secret", volume["secret"]["secretName"]
        if "configMap" in volume:
            yield "ConfigMap", volume["configMap"]["name"]
    for container in pod["containers"]:
        for source in container.get("envFrom", []):
            yield "ConfigMap", source["configMapRef"]["name"]
        for item in container.get("env", []):
            ref = item.get("valueFrom", {})
            if "secretKeyRef" in ref:
                yield "Secret", ref["secretKeyRef"]["name"]
            if "configMapKeyRef" in ref:
                yield "ConfigMap", ref["configMapKeyRef"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_reference_is_rendered_or_documented_as_created_beforehand(overlay: str) -> None:
    objects = render(overlay)
    readme = (DEPLOY / "README.md").read_text()
    for obj in workloads(objects):
        namespace = obj["metadata"]["namespace"]
        for kind, name in references(obj["spec"]["template"]["spec"]):
            present = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
            if present:
                assert present[0]["metadata"]["namespace"] == namespace
            else:
                assert name in EXTERNAL[overlay][kind], (
                    f"{overlay}: {kind} {name} is neither rendered nor external"
                )
                assert name in readme, f"deploy/README.md does not say how {kind} {name} is made"
    if overlay == "production":
        assert of_kind(objects, "Secret") == []  # no credential is committed for production


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_launcher_holds_an_api_token(overlay: str) -> None:
    objects = render(overlay)
    accounts = {a["metadata"]["name"]: a for a in of_kind(objects, "ServiceAccount")}
    for obj in workloads(objects):
        pod = obj["spec"]["template"]["spec"]
        mounted = pod.get(
            "automountServiceAccountToken",
            accounts[pod["serviceAccountName"]].get("automountServiceAccountToken", True),
        )
        assert mounted == (obj["metadata"]["name"] == "corral-launcher"), obj["metadata"]["name"]
    # Task pods run under an account with no token either.
    task_account = config_data(objects)["CORRAL_KUBERNETES_SERVICE_ACCOUNT"]
    assert accounts[task_account]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_corral_pods_meet_the_restricted_pod_security_standard(overlay: str) -> None:
    for obj in workloads(render(overlay)):
        pod = obj["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert not context.get("privileged")
            # Read-only everywhere but in dev, where Tilt writes the edited sources.
            assert context["readOnlyRootFilesystem"] is (overlay != "dev")
