"""A pod's fetch: the init container the manifest gets for a task role with ``fetch``,
validated against the Kubernetes schema; its command run for real here (no cluster:
the exact argv and environment the kubelet would exec, with this machine's Python as
the image's ``python3``); and its failure read back from a pod status as the kubelet
writes one (the termination message its log's tail becomes)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from services.launcher.kubernetes.fetch import FETCH_CONTAINER
from services.launcher.kubernetes.manifests import pod_manifest
from services.launcher.kubernetes.settings import KubernetesSettings
from services.launcher.kubernetes.status import pod_state
from shared.fetch_spec import Fetch
from tests.launcher.samples import TASK_LAUNCH
from tests.launcher.test_fetching import make_repo

SETTINGS = KubernetesSettings(namespace="corral")


def _pod(fetch: list[Fetch]) -> dict[str, Any]:
    return pod_manifest(dataclasses.replace(TASK_LAUNCH, fetch=tuple(fetch)), SETTINGS)


def _run_init_container(pod: dict[str, Any], work: Path) -> subprocess.CompletedProcess[str]:
    [init] = pod["spec"]["initContainers"]
    command = [sys.executable if part == "python3" else part for part in init["command"]]
    env = {e["name"]: e["value"] for e in init["env"]}
    work.mkdir(parents=True, exist_ok=True)
    return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("version", ["1.30", kubernetes_validate.latest_version()])
def test_a_fetching_task_gets_an_init_container(version: str) -> None:
    pod = _pod([Fetch(uri="https://example.com/data.tgz", kind="archive", path="data_corpus")])
    kubernetes_validate.validate(pod, version, strict=True)
    [init] = pod["spec"]["initContainers"]
    [task] = pod["spec"]["containers"]
    assert init["name"] == FETCH_CONTAINER
    assert init["image"] == task["image"]
    assert init["command"][:4] == ["python3", "-I", "-S", "-c"]
    assert init["workingDir"] == task["workingDir"] == "/work"
    assert init["securityContext"] == task["securityContext"]  # the pod's user, nothing more
    assert {m["mountPath"] for m in init["volumeMounts"]} == {"/work", "/tmp"}
    assert "nvidia.com/gpu" in task["resources"]["limits"]
    assert set(init["resources"]["limits"]) == {"cpu", "memory"}  # none of the task's GPUs
    assert init["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert "initContainers" not in _pod([])["spec"]


def test_the_init_containers_command_fetches(tmp_path: Path) -> None:
    first, _ = make_repo(tmp_path / "repo")
    pod = _pod([Fetch(uri=f"file://{tmp_path / 'repo'}", kind="git", version=first, path="script_train")])
    done = _run_init_container(pod, tmp_path / "work")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "work" / "script_train" / "train.py").read_text() == "print('one')\n"


def test_a_failed_fetch_ends_the_pod_saying_why(tmp_path: Path) -> None:
    missing = tmp_path / "missing.tar.gz"
    pod = _pod([Fetch(uri=f"file://{missing}", kind="archive", path="data")])
    done = _run_init_container(pod, tmp_path / "work")
    assert done.returncode != 0
    pod["status"] = {
        "phase": "Failed",
        "initContainerStatuses": [
            {
                "name": FETCH_CONTAINER,
                "state": {
                    "terminated": {"exitCode": done.returncode, "reason": "Error", "message": done.stderr}
                },
            }
        ],
        "containerStatuses": [{"name": "task", "state": {"waiting": {"reason": "PodInitializing"}}}],
    }
    ended = pod_state(pod).ended
    assert ended is not None
    assert ended.platform == "fetch_refused"
    assert ended.reason == f"could not fetch file://{missing}: no such file or directory on this node"
