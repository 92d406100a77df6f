"""Kubernetes manifests for a task attempt (a Pod) and a job (a headless Service).

Pure functions from a ``TaskLaunch`` and the settings to plain dicts, so the tests can
validate every manifest against the Kubernetes OpenAPI schema and the driver sends
exactly what was validated.

- The Pod runs the command with ``/bin/sh -c`` (as the local agent does), never
  restarts (``restartPolicy: Never``: a retry is a new attempt, decided by Corral's
  exit-code table), asks for the launch's CPUs and memory as requests and limits (so a
  GPU task is in the Guaranteed QoS class and the last to be evicted) and its GPUs as
  ``nvidia.com/gpu`` limits, and runs on the node the scheduler placed it on.
- The device plugin, not Corral, picks which GPUs of the node a container gets, and the
  container sees them as 0..n-1; ``CUDA_VISIBLE_DEVICES`` is set to that, and a task
  with no GPUs gets none even from images that default to all of them.
- The same promises as the local sandbox: the container runs as an unprivileged uid
  (``run_as_user``), with no privilege escalation, every capability dropped, the
  runtime's default seccomp profile and a read-only root filesystem; its working
  directory (``/work``, also ``HOME``), ``/tmp`` and ``/dev/shm`` are emptyDirs of its
  own (``/dev/shm`` of ``shm_mb`` when the task asks). No service account token is
  mounted: a task must not act on the cluster's API.
- A task role with ``fetch`` gets an init container that fetches its sources into
  ``/work`` first, in the task's image (``kubernetes/fetch.py``).
- A job's storage is a ``hostPath`` (a directory, which must exist) or ``nfs`` volume
  each, mounted at ``/mnt/NAME``, read-only when the config or the job's use says so.
- A replica of a service gets the spec's probes as the kubelet's: ``readinessProbe`` an
  ``httpGet`` (a ``tcpSocket`` on the service's port when the spec has none) and
  ``livenessProbe`` an ``httpGet``, on the container port allocated to the probe's label;
  the runner reads the pod's ``Ready`` condition back as the attempt's readiness
  (``status.py``). Kubernetes counts probe times in whole seconds, so they are rounded up.
- ``max_runtime_s`` becomes ``activeDeadlineSeconds``: the kubelet enforces it even
  when Corral is down, and the pod ends ``DeadlineExceeded``.
- The Service is headless, selects the job's pods, and publishes addresses before the
  pods are ready: ranks resolve each other while the rendezvous is still forming.
- Each Pod has an owner reference to its job's Service, so deleting the Service
  (or the optional job-level owner of the Service) garbage-collects the pods.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from services.launcher.agent.fetching import FetchSettings
from services.launcher.drivers import StorageMount, TaskLaunch
from services.launcher.kubernetes.fetch import fetch_init_container
from services.launcher.kubernetes.names import (
    ATTEMPT_ID_ANNOTATION,
    ATTEMPT_LABEL,
    GENERATION_ANNOTATION,
    INDEX_LABEL,
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODE_ANNOTATION,
    ROLE_LABEL,
    kubernetes_environment,
    label_value,
    pod_hostname,
    pod_name,
    service_name,
)
from services.launcher.kubernetes.settings import KubernetesSettings
from shared.jobs import JobSpec
from shared.service_spec import Probe
from shared.storage_spec import STORAGE_MOUNT_ROOT

Manifest = dict[str, Any]
CONTAINER_NAME = "task"
GPU_RESOURCE = "nvidia.com/gpu"
HAMI_CORES = "nvidia.com/gpucores"  # HAMi's device plugin: percent of a shared GPU's cores
HAMI_MEMORY = "nvidia.com/gpumem"  # and MiB of its memory
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"  # or a percentage of it


class ManifestError(ValueError):
    """A launch that cannot become a pod; the message says what to change."""


@dataclass(frozen=True)
class OwnerRef:
    """An object whose deletion should delete ours (Kubernetes garbage collection)."""

    api_version: str
    kind: str
    name: str
    uid: str

    def to_manifest(self) -> Manifest:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}


def job_labels(job_id: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY, JOB_LABEL: label_value(job_id)}


def service_manifest(job_id: str, settings: KubernetesSettings, owner: OwnerRef | None = None) -> Manifest:
    metadata: Manifest = {
        "name": service_name(job_id),
        "namespace": settings.namespace,
        "labels": job_labels(job_id),
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner.to_manifest()]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: label_value(job_id)},
            "publishNotReadyAddresses": True,
        },
    }


def service_owner(service: Manifest) -> OwnerRef:
    """The owner reference to a Service as the API server returned it (with its uid)."""
    metadata = service["metadata"]
    return OwnerRef("v1", "Service", metadata["name"], metadata["uid"])


def _cpu_quantity(cpus: float) -> str:
    return f"{max(1, round(cpus * 1000))}m"


def _resources(launch: TaskLaunch) -> Manifest:
    amounts = {"cpu": _cpu_quantity(launch.cpus), "memory": f"{launch.memory_mb}Mi"}
    limits = dict(amounts)
    if launch.gpus > 0:
        limits[GPU_RESOURCE] = str(launch.gpus)
    if launch.gpu_milli:
        # A share of a GPU as HAMi's device plugin takes it (one GPU, a percentage of its
        # cores, its memory in MiB): Kubernetes itself counts GPUs only whole.
        percent = str(max(1, -(-launch.gpu_milli // 10)))
        limits[HAMI_CORES] = percent
        if launch.gpu_memory_mb is not None:
            limits[HAMI_MEMORY] = str(launch.gpu_memory_mb)
        else:  # its fraction of the GPU's memory, as on a node agent's pool
            limits[HAMI_MEMORY_PERCENT] = percent
    return {"requests": amounts, "limits": limits}


def _node_selection(node_id: str, settings: KubernetesSettings) -> Manifest:
    if settings.node_binding == "node_name":
        return {"nodeName": node_id}
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_id]}]}
    return {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    }


def _environment(launch: TaskLaunch, settings: KubernetesSettings) -> list[Manifest]:
    env = kubernetes_environment(
        launch.env, job_id=launch.job_id, namespace=settings.namespace, cluster_domain=settings.cluster_domain
    )
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(launch.gpus))
    if launch.gpus == 0:
        env["NVIDIA_VISIBLE_DEVICES"] = "void"
    else:
        env.pop("NVIDIA_VISIBLE_DEVICES", None)  # the device plugin sets it
    return [{"name": name, "value": value} for name, value in sorted(env.items())]


def _container_ports(launch: TaskLaunch) -> list[Manifest]:
    numbers = sorted({port for ports in launch.ports.values() for port in ports})
    return [{"containerPort": port, "protocol": "TCP"} for port in numbers]


def _probes(launch: TaskLaunch) -> Manifest:
    """The kubelet's probes of a service's replica (nothing for a batch task)."""
    service = launch.service
    if service is None:
        return {}

    def port_of(label: str | None) -> int:
        ports = launch.ports.get(label or service.port) or []
        if not ports:
            raise ManifestError(
                f"task {launch.task_role}-{launch.task_index} of job {launch.job_id} was allocated no port"
                f" labelled {label or service.port!r} to probe"
            )
        return ports[0]

    probes: Manifest = {}
    readiness = service.readiness
    if readiness is None:
        probes["readinessProbe"] = {"tcpSocket": {"port": port_of(None)}, "periodSeconds": 1}
    else:
        probes["readinessProbe"] = _http_probe(readiness, port_of(readiness.port))
    if service.liveness is not None:
        probes["livenessProbe"] = _http_probe(service.liveness, port_of(service.liveness.port))
    return probes


def _http_probe(probe: Probe, port: int) -> Manifest:
    return {
        "httpGet": {"path": probe.path, "port": port},
        "periodSeconds": max(1, math.ceil(probe.period_s)),
        "timeoutSeconds": max(1, math.ceil(probe.timeout_s)),
        "failureThreshold": probe.failure_threshold,
        "initialDelaySeconds": math.ceil(probe.initial_delay_s),
    }


WORK_DIR = "/work"
# (volume, mount path, in memory): what the task may write, all its own.
_OWN_DIRECTORIES = (("work", WORK_DIR, False), ("tmp", "/tmp", False), ("dshm", "/dev/shm", True))  # noqa: S108


def storage_mounts(spec: JobSpec, configs: list[dict[str, Any]]) -> tuple[StorageMount, ...]:
    """The storage a job's tasks mount, from the configs read at the claim; a config gone
    since the submit is a ``ManifestError`` (the task fails to start, saying so)."""
    found = {str(c["name"]): c for c in configs}
    mounts = []
    for use in spec.storage:
        config = found.get(use.name)
        if config is None:
            raise ManifestError(
                f"storage {use.name!r} has no config any more (deleted since the submit); ask an admin"
                " to define it again (PUT /api/v1/storage/NAME), or drop it from the job"
            )
        read_only = bool(config["read_only"]) or use.read_only
        mounts.append(StorageMount(use.name, str(config["kind"]), str(config["source"]), read_only))
    return tuple(mounts)


def _storage_volumes(launch: TaskLaunch) -> tuple[list[Manifest], list[Manifest]]:
    """(volumes, volume mounts) of the task's storage; volumes are named by position, as
    a storage's name may hold ``_``, which a volume's may not."""
    volumes, mounts = [], []
    for index, storage in enumerate(launch.storage):
        name = f"storage-{index}"
        if storage.kind == "nfs":
            server, _, export = storage.source.rpartition(":")
            volume: Manifest = {
                "nfs": {"server": server.strip("[]"), "path": export, "readOnly": storage.read_only}
            }
        else:
            volume = {"hostPath": {"path": storage.source, "type": "Directory"}}
        volumes.append({"name": name, **volume})
        path = f"{STORAGE_MOUNT_ROOT}/{storage.name}"
        mounts.append({"name": name, "mountPath": path, "readOnly": storage.read_only})
    return volumes, mounts


def _own_volume(name: str, in_memory: bool, shm_mb: int | None) -> Manifest:
    if not in_memory:
        return {"name": name, "emptyDir": {}}
    size = {"sizeLimit": f"{shm_mb}Mi"} if shm_mb is not None else {}
    return {"name": name, "emptyDir": {"medium": "Memory", **size}}


def pod_manifest(launch: TaskLaunch, settings: KubernetesSettings, owner: OwnerRef | None = None) -> Manifest:
    image = launch.image or settings.default_image
    if image is None:
        raise ManifestError(
            f"task {launch.task_role}-{launch.task_index} of job {launch.job_id} names no image; "
            "set `image` on the task role or CORRAL_KUBERNETES_DEFAULT_IMAGE"
        )
    if not launch.node_id:
        raise ManifestError(f"attempt {launch.attempt_id} has no node; the scheduler places before launch")
    metadata: Manifest = {
        "name": pod_name(launch.attempt_id),
        "namespace": settings.namespace,
        "labels": {
            **job_labels(launch.job_id),
            ROLE_LABEL: label_value(launch.task_role),
            INDEX_LABEL: str(launch.task_index),
            ATTEMPT_LABEL: str(launch.attempt_no),
        },
        "annotations": {
            ATTEMPT_ID_ANNOTATION: launch.attempt_id,
            GENERATION_ANNOTATION: str(launch.generation),
            NODE_ANNOTATION: launch.node_id,
        },
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner.to_manifest()]
    container: Manifest = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["/bin/sh", "-c", launch.command],
        "env": [*_environment(launch, settings), {"name": "HOME", "value": WORK_DIR}],
        "resources": _resources(launch),
        "workingDir": WORK_DIR,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
        },
        "volumeMounts": [{"name": name, "mountPath": path} for name, path, _ in _OWN_DIRECTORIES],
    }
    storage_volumes, storage_volume_mounts = _storage_volumes(launch)
    container["volumeMounts"] += storage_volume_mounts
    ports = _container_ports(launch)
    if ports:
        container["ports"] = ports
    container.update(_probes(launch))
    spec: Manifest = {
        "restartPolicy": "Never",
        "hostname": pod_hostname(launch.task_role, launch.task_index),
        "subdomain": service_name(launch.job_id),
        "terminationGracePeriodSeconds": settings.termination_grace_s,
        "enableServiceLinks": False,  # one Service per job: thousands of env vars otherwise
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsUser": settings.run_as_user,
            "runAsGroup": settings.run_as_group,
            "fsGroup": settings.run_as_group,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [
            *(_own_volume(name, in_memory, launch.shm_mb) for name, _, in_memory in _OWN_DIRECTORIES),
            *storage_volumes,
        ],
        "containers": [container],
        **_node_selection(launch.node_id, settings),
    }
    if launch.fetch:  # (the task's sources, fetched first: kubernetes/fetch.py)
        spec["initContainers"] = [fetch_init_container(launch, container, WORK_DIR, FetchSettings())]
    if launch.max_runtime_s is not None:
        spec["activeDeadlineSeconds"] = max(1, launch.max_runtime_s)
    if settings.service_account is not None:
        spec["serviceAccountName"] = settings.service_account
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
