"""A generic job's ``ssh`` end to end, through the API, on a simulated node of real
processes: every task's sshd started beside its command by the agent (and gone with
it), ``ssh worker-1`` from another task after the barrier, and ``corral ssh`` with a key the user keeps in
Corral, carried over the API's gateway to the task's sshd (no port of the node is
reached directly by the client).

Needs OpenSSH's server and client (installed with apt by ``tests/system_packages.py``
when missing)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.launcher.job_keys import new_key_pair
from tests.e2e.stack import Stack, submit_spec, wait_state
from tests.system_packages import ensure_debian_packages

pytestmark = pytest.mark.timeout(240)
ENDED = {"EXITED", "FAILED", "LOST"}


@pytest.fixture(autouse=True)
def _openssh() -> None:
    ensure_debian_packages({Path("/usr/sbin/sshd"): "openssh-server", Path("/usr/bin/ssh"): "openssh-client"})


async def _user(stack: Stack, name: str) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    async with stack.client() as admin:
        assert (await admin.post("/api/v1/users", json={"name": name})).status_code == 201
        body = {"name": "shell", "user": name, "scopes": ["submit", "exec"]}
        token = (await admin.post("/api/v1/tokens", json=body)).json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=stack.base_url, headers=headers, timeout=10) as http:
        yield http, token


@pytest.fixture
async def alice(stack: Stack) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    async for pair in _user(stack, "alice"):
        yield pair


def _spec(main_command: str, worker_command: str, ssh: dict[str, Any]) -> dict[str, Any]:
    resources = {"gpus": 0, "cpus": 0.25, "memory_mb": 256}
    return {
        "name": "ssh-test",
        "tasks": [
            {"name": "main", "command": main_command, "resources": resources},
            {"name": "worker", "instances": 2, "command": worker_command, "resources": resources},
        ],
        "ssh": ssh,
        "max_runtime_s": 200,
    }


async def _attempt(http: httpx.AsyncClient, job_id: str, task: str, states: set[str]) -> dict[str, Any]:
    for _ in range(600):
        job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
        for attempt in job["attempts"]:
            if f"{attempt['task_role']}-{attempt['task_index']}" == task and attempt["state"] in states:
                return dict(attempt)
        await asyncio.sleep(0.1)
    raise AssertionError(f"task {task} of {job_id} never reached {states}: {job}")


async def _log(http: httpx.AsyncClient, job_id: str, task: str) -> str:
    return (await http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": task})).text


async def test_a_task_runs_ssh_worker_1_after_the_barrier(
    stack: Stack, alice: tuple[httpx.AsyncClient, str]
) -> None:
    http, _ = alice
    main = "ssh worker-1 'echo \"reached $CORRAL_TASK_ROLE-$CORRAL_TASK_INDEX\"' && ssh worker-0 hostname"
    job_id = await submit_spec(http, _spec(main, "sleep 600", {"barrier": True, "barrier_timeout_s": 60}))
    try:
        ended = await _attempt(http, job_id, "main-0", ENDED)
        log = await _log(http, job_id, "main-0")
        assert ended["exit_code"] == 0, f"{ended}\n{log}\n{await _log(http, job_id, 'worker-1')}"
        assert "reached worker-1" in log, log
        spec = (await http.get(f"/api/v1/jobs/{job_id}")).json()["spec"]
        assert all(role["ports"] == {"ssh": 1} for role in spec["tasks"])
        assert len(_sshd_pids(stack)) == 2  # the workers' (main's ended with its command)
    finally:
        await http.post(f"/api/v1/jobs/{job_id}/cancel")
    await wait_state(http, job_id, {"CANCELLED", "FAILED", "SUCCEEDED"}, timeout_s=60)
    for _ in range(200):
        if not _sshd_pids(stack):
            break
        await asyncio.sleep(0.1)
    assert not _sshd_pids(stack), "a task's sshd outlived its task"


def _sshd_pids(stack: Stack) -> list[int]:
    """The sshd processes started with a config under this stack's home (not the task
    shells whose command line holds the same text)."""
    pattern = f"^(sshd: )?/\\S*sshd -D -e -f {stack.home.resolve()}"
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def _corral_ssh(stack: Stack, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CORRAL_URL": stack.base_url, "CORRAL_TOKEN": token}
    return subprocess.run(  # our own CLI, as a user runs it
        [sys.executable, "-m", "corral", "ssh", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _private_key(directory: Path, name: str) -> tuple[Path, str]:
    pair = new_key_pair(f"alice@{name}")
    path = directory / name
    path.write_text(pair.private)
    path.chmod(0o600)
    return path, pair.public


async def test_corral_ssh_logs_in_with_a_kept_key_and_refuses_another(
    stack: Stack, alice: tuple[httpx.AsyncClient, str], tmp_path: Path
) -> None:
    http, token = alice
    key, public = _private_key(tmp_path, "laptop")
    other, _ = _private_key(tmp_path, "stolen")
    assert (
        await http.put("/api/v1/users/me/ssh-keys/laptop", json={"public_key": public})
    ).status_code == 201
    worker = 'echo "words of $CORRAL_TASK_ROLE-$CORRAL_TASK_INDEX" > some-file-$CORRAL_TASK_INDEX; sleep 600'
    job_id = await submit_spec(http, _spec("sleep 600", worker, {"user_keys": ["laptop"]}))
    try:
        await _attempt(http, job_id, "worker-1", {"RUNNING"})
        ssh_options = ["-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
        done = _corral_ssh(stack, token, job_id, "--task", "worker-1", "--", *ssh_options, "cat some-file-1")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "words of worker-1"
        ssh_options[1] = str(other)
        refused = _corral_ssh(
            stack, token, job_id, "--task", "worker-1", "--", *ssh_options, "cat some-file-1"
        )
        assert refused.returncode == 255, refused.stdout
        assert "Permission denied" in refused.stderr, refused.stderr
    finally:
        await http.post(f"/api/v1/jobs/{job_id}/cancel")
