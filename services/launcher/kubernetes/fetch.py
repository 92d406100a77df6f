"""A pod's fetch: the init container that fetches a task's sources (``tasks[].fetch``)
into its working directory before the task's container starts, and what its failure
means.

It runs the node agent's own worker (``services/launcher/agent/fetch_worker.py``, the
standard library only) with the image's ``python3``: the same checks (tarfile's ``data``
filter, the byte budget, the deadline) and the same failure line on both drivers. It
uses the task's own image, so it needs ``python3`` there (and ``git`` for a git fetch);
an image without them fails the start saying so (``fetch_failed``). It runs as the pod's
user with the task container's security context, its working directory and ``/tmp``
mounted, and the task's CPUs and memory but none of its GPUs (an init container's
devices would be handed to it alone). The limits are the launcher's ``CORRAL_FETCH_*``.

Its failure ends the pod (``restartPolicy: Never``); its log's last lines become its
termination message (``FallbackToLogsOnError``), whose ``CORRAL-FETCH-FAILED`` line is
read back into the attempt's reason and platform condition (``fetch_failure``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.launcher.agent.fetching import (
    WORKER_SOURCE,
    FetchSettings,
    failure_of,
    platform_of,
    worker_environment,
    worker_order,
)
from services.launcher.drivers import TaskEnded, TaskLaunch

FETCH_CONTAINER = "fetch"
Manifest = dict[str, Any]


def fetch_init_container(
    launch: TaskLaunch, task_container: Manifest, work_dir: str, settings: FetchSettings
) -> Manifest:
    """The init container fetching ``launch.fetch`` beside ``task_container``."""
    order = worker_order(list(launch.fetch), settings, None, None)
    requests = task_container["resources"]["requests"]
    env = worker_environment(Path(work_dir), proxies=False)
    return {
        "name": FETCH_CONTAINER,
        "image": task_container["image"],
        "command": ["python3", "-I", "-S", "-c", WORKER_SOURCE, order],
        "env": [{"name": name, "value": value} for name, value in env.items()],
        "resources": {"requests": dict(requests), "limits": dict(requests)},
        "workingDir": work_dir,
        "securityContext": dict(task_container["securityContext"]),
        "volumeMounts": [m for m in task_container["volumeMounts"] if m["mountPath"] in (work_dir, "/tmp")],  # noqa: S108 - the pod's own emptyDir
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def fetch_failure(pod: Manifest) -> TaskEnded | None:
    """How the pod's fetch failed, if it did (None: it did not, or has not yet)."""
    for status in pod.get("status", {}).get("initContainerStatuses") or []:
        if status.get("name") != FETCH_CONTAINER:
            continue
        terminated = (status.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if not terminated or code == 0:
            return None
        message = str(terminated.get("message") or terminated.get("reason") or "")
        failure = failure_of(message.encode(), int(code or 0))
        return TaskEnded(None, None, platform_of(failure), f"could not fetch {failure.uri}: {failure.what}")
    return None
