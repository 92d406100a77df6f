"""What a pod's status says about its attempt: pending, running, or ended and how.

Pure functions of the pod as the API server returns it (a JSON dict). The ending is a
``TaskEnded`` for Corral's exit-code table: the container's exit code and signal when
there is one, and in ``platform`` a condition only the cluster can see — a row of the
exit-code table (``services/launcher/exit_codes.yaml``):

================================  ===========================  ==============
pod status                        platform                     classification
================================  ===========================  ==============
``DeadlineExceeded``              ``max_runtime_exceeded``     permanent
container ``OOMKilled``           ``oom_killed``               permanent
``Evicted`` / kubelet pressure    ``evicted``                  unknown
``ErrImagePull`` & co.            ``image_pull_failed``        unknown
create-container errors           ``start_failed``             permanent
init ``fetch``: source's fault    ``fetch_refused``            permanent
init ``fetch``: network, time     ``fetch_failed``             unknown
kubelet rejected (``OutOfcpu``)   ``node_rejected``            transient
disruption: scheduler preempted   ``preempted``                transient
disruption: drained (eviction)    ``preempted``                transient
disruption: taint manager, GC     ``node_lost``                transient
phase ``Unknown``, ``NodeLost``   ``node_lost``                transient
deleted outside Corral            ``task_lost``                transient
================================  ===========================  ==============

A running pod with a readiness probe (a service's replica) also says whether it is
ready: its ``Ready`` condition, with the condition's reason as the word on it.

A pod that can never run (image cannot be pulled, node lost) is marked ``stuck``: the
driver deletes it after reporting the end, so it stops holding the node's GPUs and a
node that comes back kills the stale container instead of finishing it twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.launcher.drivers import TaskEnded
from services.launcher.kubernetes.fetch import fetch_failure
from services.launcher.kubernetes.manifests import CONTAINER_NAME
from services.launcher.kubernetes.names import ATTEMPT_ID_ANNOTATION, JOB_LABEL

Pod = dict[str, Any]

IMAGE_PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
CREATE_FAILURES = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
START_FAILURES = frozenset({"ContainerCannotRun", "StartError"})
ADMISSION_FAILURES = frozenset({"NodeAffinity", "NodeSelectorMismatching", "UnexpectedAdmissionError"})
NODE_GONE_REASONS = frozenset({"NodeLost", "Terminated", "NodeShutdown"})
DISRUPTIONS = {
    "PreemptionByScheduler": ("preempted", "preempted by the Kubernetes scheduler"),
    "EvictionByEvictionAPI": ("preempted", "evicted through the eviction API (node drained)"),
    "DeletionByTaintManager": ("node_lost", "deleted because its node became unreachable or not ready"),
    "DeletionByPodGC": ("node_lost", "deleted because its node no longer exists"),
    "TerminationByKubelet": (None, "terminated by the kubelet (node pressure or shutdown)"),
}


@dataclass(frozen=True)
class PodState:
    attempt_id: str
    job_id: str
    running: bool
    ended: TaskEnded | None = None
    stuck: bool = False
    readiness: tuple[bool, str] | None = None  # running with a readiness probe: (ready, why)


def attempt_of(pod: Pod) -> str:
    metadata = pod.get("metadata", {})
    return str(metadata.get("annotations", {}).get(ATTEMPT_ID_ANNOTATION) or metadata.get("name", ""))


def _container(pod: Pod) -> dict[str, Any]:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER_NAME:
            return dict(status.get("state") or {})
    return {}


def _disruption(pod: Pod) -> tuple[str | None, str] | None:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            known = DISRUPTIONS.get(condition.get("reason", ""))
            message = condition.get("message") or condition.get("reason", "disrupted")
            return (known[0], f"{known[1]}: {message}") if known else (None, f"disrupted: {message}")
    return None


def _detail(message: str | None) -> str:
    return f": {message}" if message else ""


def _from_container(terminated: dict[str, Any]) -> TaskEnded:
    code = terminated.get("exitCode")
    signal = terminated.get("signal") or None
    why = terminated.get("reason") or ""
    if why == "OOMKilled":
        return TaskEnded(code, signal, "oom_killed", "killed for exceeding its memory limit (OOMKilled)")
    if why in START_FAILURES:
        return TaskEnded(
            code,
            signal,
            "start_failed",
            f"the container could not start ({why}){_detail(terminated.get('message'))}",
        )
    said = f" ({why})" if why not in ("", "Error", "Completed") else ""
    return TaskEnded(code, signal, None, f"exited with code {code}{said}")


def _failed(pod: Pod, terminated: dict[str, Any]) -> TaskEnded:
    status = pod.get("status", {})
    why, message = status.get("reason") or "", status.get("message")
    code = terminated.get("exitCode")
    if why == "DeadlineExceeded":
        return TaskEnded(
            code, None, "max_runtime_exceeded", f"ran longer than max_runtime_s{_detail(message)}"
        )
    disruption = _disruption(pod)
    if disruption is not None and (disruption[0] is not None or not terminated):
        return TaskEnded(code, None, disruption[0], disruption[1])
    if why == "Evicted":
        return TaskEnded(code, None, "evicted", f"evicted by the kubelet{_detail(message)}")
    if why in NODE_GONE_REASONS:
        return TaskEnded(code, None, "node_lost", f"its node went away ({why}){_detail(message)}")
    if (fetch := fetch_failure(pod)) is not None:
        return fetch
    if terminated:
        return _from_container(terminated)
    if why.startswith("OutOf") or why in ADMISSION_FAILURES:
        return TaskEnded(None, None, "node_rejected", f"the node rejected the pod ({why}){_detail(message)}")
    return TaskEnded(
        None,
        None,
        "task_lost",
        f"the pod failed without a container exit status ({why or 'no reason'}){_detail(message)}",
    )


def pod_state(pod: Pod) -> PodState:
    attempt = attempt_of(pod)
    job = str(pod.get("metadata", {}).get("labels", {}).get(JOB_LABEL, ""))
    status = pod.get("status", {})
    phase = status.get("phase") or "Pending"
    container = _container(pod)
    terminated = dict(container.get("terminated") or {})
    if phase == "Succeeded":
        return PodState(
            attempt, job, False, TaskEnded(terminated.get("exitCode", 0), None, None, "exited with code 0")
        )
    if phase == "Failed":
        return PodState(attempt, job, False, _failed(pod, terminated))
    if phase == "Unknown" or status.get("reason") in NODE_GONE_REASONS:
        reason = f"the pod's node stopped reporting (phase {phase}){_detail(status.get('message'))}"
        return PodState(attempt, job, False, TaskEnded(None, None, "node_lost", reason), stuck=True)
    if terminated:  # Running on paper, but the only container has ended
        return PodState(attempt, job, False, _from_container(terminated))
    waiting = container.get("waiting") or {}
    why = waiting.get("reason") or ""
    if why in IMAGE_PULL_FAILURES:
        image = pod.get("spec", {}).get("containers", [{}])[0].get("image", "?")
        reason = f"image {image} could not be pulled ({why}){_detail(waiting.get('message'))}"
        return PodState(attempt, job, False, TaskEnded(None, None, "image_pull_failed", reason), stuck=True)
    if why in CREATE_FAILURES:
        reason = f"the container could not be created ({why}){_detail(waiting.get('message'))}"
        return PodState(attempt, job, False, TaskEnded(None, None, "start_failed", reason), stuck=True)
    running = phase == "Running" and "running" in container
    return PodState(attempt, job, running=running, readiness=_readiness(pod) if running else None)


def _readiness(pod: Pod) -> tuple[bool, str] | None:
    """Whether a pod the kubelet probes is ready (None for one it does not probe)."""
    containers = pod.get("spec", {}).get("containers") or []
    if not any(c.get("name") == CONTAINER_NAME and "readinessProbe" in c for c in containers):
        return None
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return True, "the pod is Ready (its readiness probe passes)"
            why = condition.get("reason") or "not Ready"
            return (
                False,
                f"the pod's readiness probe does not pass ({why}){_detail(condition.get('message'))}",
            )
    return False, "the kubelet has not probed the pod yet"


def deleted_state(pod: Pod, stopped_by_us: bool) -> PodState:
    """The pod object is gone; what became of its attempt."""
    state = pod_state(pod)
    if state.ended is not None:
        return state
    disruption = _disruption(pod)
    if disruption is not None:
        ended = TaskEnded(None, None, disruption[0] or "task_lost", disruption[1])
    elif stopped_by_us:
        ended = TaskEnded(
            None, None, None, "stopped: the pod was deleted before its container reported an exit"
        )
    else:
        ended = TaskEnded(None, None, "task_lost", "the pod was deleted outside Corral")
    return PodState(state.attempt_id, state.job_id, False, ended)


def finished_at(pod: Pod) -> str | None:
    """When the container finished (RFC 3339), for keeping finished pods a while."""
    value = (_container(pod).get("terminated") or {}).get("finishedAt")
    return str(value) if value else None


def is_terminal(pod: Pod) -> bool:
    return pod_state(pod).ended is not None
