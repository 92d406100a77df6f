"""Every manifest the Kubernetes driver sends validates against the Kubernetes OpenAPI
schema (``kubernetes-validate``, strict: unknown fields are errors), for launches that
exercise each branch of the builders."""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes_validate
import pytest

from services.launcher.drivers import StorageMount
from services.launcher.kubernetes.manifests import (
    ManifestError,
    OwnerRef,
    pod_manifest,
    service_manifest,
    storage_mounts,
)
from services.launcher.kubernetes.names import dns_label, kubernetes_environment, label_value, pod_dns_name
from services.launcher.kubernetes.settings import KubernetesSettings
from shared.jobs import JobSpec
from tests.launcher.samples import TASK_LAUNCH

# The oldest Kubernetes still commonly run and the newest the package knows.
VERSIONS = ["1.30", kubernetes_validate.latest_version()]
SETTINGS = KubernetesSettings(namespace="corral")
OWNER = OwnerRef("v1", "Service", "job-01m81scc9vkd1fesxk1gz86zrz", "6f1e3c2a-1b2c-4d5e-8f90-0a1b2c3d4e5f")


LAUNCHES = {
    "gpu": TASK_LAUNCH,
    "no-gpu": dataclasses.replace(TASK_LAUNCH, gpus=0, gpu_indices=(), cpus=0.5, memory_mb=512),
    "ports": dataclasses.replace(
        TASK_LAUNCH, ports={"master": [29500], "http": [30001, 30002], "ssh": [30001]}
    ),
    "max-runtime": dataclasses.replace(TASK_LAUNCH, max_runtime_s=7200),
    "odd-role-name": dataclasses.replace(TASK_LAUNCH, task_role="param_server" + "x" * 52, task_index=1023),
    "no-rendezvous": dataclasses.replace(TASK_LAUNCH, env={"FOO": "bar"}),
    "share": dataclasses.replace(TASK_LAUNCH, gpus=1, gpu_indices=(0,), gpu_milli=250),
    "share-with-memory": dataclasses.replace(
        TASK_LAUNCH, gpus=1, gpu_indices=(0,), gpu_milli=500, gpu_memory_mb=20000
    ),
}
SETTINGS_VARIANTS = {
    "affinity": SETTINGS,
    "node-name": KubernetesSettings(
        namespace="ml-prod", node_binding="node_name", service_account="trainer", termination_grace_s=0
    ),
}


def validate(manifest: dict[str, Any], version: str) -> None:
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(p) for p in error.path)
        pytest.fail(f"{manifest['kind']} invalid for Kubernetes {version} at {path}: {error.message}")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("settings_name", SETTINGS_VARIANTS)
@pytest.mark.parametrize("launch_name", LAUNCHES)
def test_every_pod_manifest_is_valid(launch_name: str, settings_name: str, version: str) -> None:
    validate(pod_manifest(LAUNCHES[launch_name], SETTINGS_VARIANTS[settings_name], OWNER), version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("owner", [None, OwnerRef("apps/v1", "Deployment", "corral-launcher", "0-1-2")])
def test_every_service_manifest_is_valid(owner: OwnerRef | None, version: str) -> None:
    validate(service_manifest(TASK_LAUNCH.job_id, SETTINGS, owner), version)


def test_the_validator_catches_a_broken_manifest() -> None:
    """A guard against validating nothing: a misspelt field is an error in strict mode."""
    broken = pod_manifest(TASK_LAUNCH, SETTINGS)
    broken["spec"]["restartPolicyy"] = "Never"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.30", strict=True)


def test_gpu_and_cpu_resources() -> None:
    gpu = pod_manifest(TASK_LAUNCH, SETTINGS)["spec"]["containers"][0]
    assert gpu["resources"] == {
        "requests": {"cpu": "16000m", "memory": "65536Mi"},
        "limits": {"cpu": "16000m", "memory": "65536Mi", "nvidia.com/gpu": "4"},
    }
    no_gpu = pod_manifest(LAUNCHES["no-gpu"], SETTINGS)["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in no_gpu["resources"]["limits"]
    env = {e["name"]: e["value"] for e in no_gpu["env"]}
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"  # CUDA images default to all GPUs


def test_a_share_of_a_gpu_asks_for_hamis_resources() -> None:
    limits = pod_manifest(LAUNCHES["share"], SETTINGS)["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["nvidia.com/gpucores"]) == ("1", "25")
    assert limits["nvidia.com/gpumem-percentage"] == "25"  # its fraction of the memory, by default
    asked = pod_manifest(LAUNCHES["share-with-memory"], SETTINGS)["spec"]["containers"][0]["resources"][
        "limits"
    ]
    assert (asked["nvidia.com/gpucores"], asked["nvidia.com/gpumem"]) == ("50", "20000")
    assert "nvidia.com/gpumem-percentage" not in asked


def test_ports_runtime_and_node_binding() -> None:
    pod = pod_manifest(LAUNCHES["ports"], SETTINGS_VARIANTS["node-name"])
    assert pod["spec"]["containers"][0]["ports"] == [
        {"containerPort": 29500, "protocol": "TCP"},
        {"containerPort": 30001, "protocol": "TCP"},
        {"containerPort": 30002, "protocol": "TCP"},
    ]
    assert pod["spec"]["nodeName"] == "gpu-node-3"
    assert "affinity" not in pod["spec"]
    assert "activeDeadlineSeconds" not in pod["spec"]
    assert pod_manifest(LAUNCHES["max-runtime"], SETTINGS)["spec"]["activeDeadlineSeconds"] == 7200


def test_a_launch_without_an_image_says_how_to_fix_it() -> None:
    with pytest.raises(ManifestError, match="CORRAL_KUBERNETES_DEFAULT_IMAGE"):
        pod_manifest(dataclasses.replace(TASK_LAUNCH, image=None), SETTINGS)
    defaulted = pod_manifest(
        dataclasses.replace(TASK_LAUNCH, image=None), SETTINGS.model_copy(update={"default_image": "x:1"})
    )
    assert defaulted["spec"]["containers"][0]["image"] == "x:1"


def test_names_are_valid_and_distinct_after_sanitising() -> None:
    assert dns_label("worker-3") == "worker-3"
    assert dns_label("a_b-0") != dns_label("a-b-0")
    long_name = dns_label("param_server" + "x" * 60 + "-1023")
    assert len(long_name) <= 63
    assert long_name[0].isalpha()
    assert label_value("x" * 64) != label_value("x" * 65)
    assert len(label_value("x" * 64)) <= 63


def test_rendezvous_addresses_become_pod_dns_names() -> None:
    env = {
        "MASTER_ADDR": "10.0.0.1",
        "PAI_TASK_ROLE_LIST": "master,data-worker",
        "PAI_TASK_ROLE_TASK_COUNT_master": "1",
        "PAI_TASK_ROLE_TASK_COUNT_data_worker": "2",
        "PAI_HOST_IP_master_0": "10.0.0.1",
        "PAI_HOST_IP_data_worker_1": "10.0.0.2",
        "OTHER": "kept",
    }
    job = "job-01m81scc9vkd1fesxk1gz86zrz"
    rewritten = kubernetes_environment(env, job_id=job, namespace="ml", cluster_domain="cluster.local")
    assert rewritten["MASTER_ADDR"] == f"master-0.{job}.ml.svc.cluster.local"
    assert rewritten["PAI_HOST_IP_data_worker_1"] == f"data-worker-1.{job}.ml.svc.cluster.local"
    assert rewritten["PAI_HOST_IP_data_worker_0"] == pod_dns_name(
        job, "data-worker", 0, "ml", "cluster.local"
    )
    assert rewritten["OTHER"] == "kept"
    pod = pod_manifest(dataclasses.replace(TASK_LAUNCH, task_role="data-worker", task_index=1), SETTINGS)
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("data-worker-1", job)


def test_a_pod_gets_the_sandbox_promises() -> None:
    """Non-root, nothing to escalate to, a read-only root with writable places of its own,
    requests equal to limits, and no token for the cluster's API."""
    for launch in LAUNCHES.values():
        pod = pod_manifest(launch, SETTINGS)["spec"]
        [container] = pod["containers"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == SETTINGS.run_as_user != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
        }
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert mounts == {"/work", "/tmp", "/dev/shm"}
        assert container["workingDir"] == "/work"
        # (extended resources, the GPU and HAMi's, are asked as limits: requests follow them)
        limits = {
            k: v for k, v in container["resources"]["limits"].items() if not k.startswith("nvidia.com/")
        }
        assert container["resources"]["requests"] == limits


STORAGE_LAUNCH = dataclasses.replace(
    TASK_LAUNCH,
    shm_mb=4096,
    storage=(
        StorageMount("team_data", "nfs", "nfs1.example.com:/datasets", read_only=True),
        StorageMount("scratch", "hostpath", "/srv/corral-storage/scratch", read_only=False),
        StorageMount("v6", "nfs", "[fd00::1]:/v6", read_only=False),
    ),
)


@pytest.mark.parametrize("version", VERSIONS)
def test_storage_and_shm_size_become_volumes(version: str) -> None:
    pod = pod_manifest(STORAGE_LAUNCH, SETTINGS, OWNER)
    validate(pod, version)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4096Mi"}}
    assert volumes["storage-0"]["nfs"] == {
        "server": "nfs1.example.com",
        "path": "/datasets",
        "readOnly": True,
    }
    assert volumes["storage-1"]["hostPath"] == {"path": "/srv/corral-storage/scratch", "type": "Directory"}
    assert volumes["storage-2"]["nfs"]["server"] == "fd00::1"
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "storage-0", "mountPath": "/mnt/team_data", "readOnly": True} in mounts
    assert {"name": "storage-1", "mountPath": "/mnt/scratch", "readOnly": False} in mounts
    # Without them, as before: /dev/shm of the node's default, no storage.
    plain = pod_manifest(TASK_LAUNCH, SETTINGS, OWNER)
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in plain["spec"]["volumes"]
    assert not [v for v in plain["spec"]["volumes"] if v["name"].startswith("storage-")]


def test_a_jobs_storage_is_resolved_from_the_configs_and_a_missing_one_refused() -> None:
    spec = JobSpec.model_validate(
        {
            "name": "train",
            "tasks": [{"name": "main", "command": "true", "resources": {"gpus": 0}}],
            "storage": [{"name": "data", "read_only": True}, {"name": "models"}],
        }
    )
    configs = [
        {"name": "models", "kind": "hostpath", "source": "/srv/m", "read_only": True},
        {"name": "data", "kind": "nfs", "source": "n:/d", "read_only": False},
    ]
    assert storage_mounts(spec, configs) == (
        StorageMount("data", "nfs", "n:/d", read_only=True),
        StorageMount("models", "hostpath", "/srv/m", read_only=True),
    )
    with pytest.raises(ManifestError, match="storage 'models' has no config any more"):
        storage_mounts(spec, configs[1:])
