"""Task images with real processes. A node that sets ``CORRAL_CONTAINER_RUNTIME=podman`` (its
command the FAKE runtime of tests/fake_container_runtime.py: no runtime runs containers in
this machine's sandbox) runs a job's image task through the runtime, with the invocation
podman documents. Where the only ready node has no runtime, an image job waits and its
reason says what to set. A cluster where no node runs images refuses an image job at submit,
naming the opt-in; with ``allow_host_execution`` it runs on the host, and its log says the
image was not used. A node whose runtime's command is missing refuses to start."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import fake_container_runtime
from tests.e2e.stack import Stack, submit_spec, wait_state

IMAGE = "python:3.12-slim"
COMMAND = 'echo "in the image, rank $RANK"'


def _spec(name: str, **fields: Any) -> dict[str, Any]:
    task = {"name": "main", "command": COMMAND, "image": IMAGE, "resources": {"gpus": 1}}
    return {"name": name, "tasks": [task], **fields}


async def test_a_job_with_an_image_runs_through_the_nodes_runtime(runtime_stack: Stack) -> None:
    async with runtime_stack.client() as http:
        job_id = await submit_spec(http, _spec("in-image"))
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}, timeout_s=60)
        assert job["state"] == "SUCCEEDED", job
        assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text == "in the image, rank 0\n"
    [attempt] = job["attempts"]
    workdirs = [p.parent for p in runtime_stack.home.rglob(fake_container_runtime.CALLS)]
    [call] = [c for wd in workdirs for c in fake_container_runtime.calls(wd)]
    argv = call["argv"]
    assert argv[:6] == ["run", "--rm", "--name", f"corral-{attempt['id']}", "--network", "host"]
    assert "--user" in argv
    assert argv[-4:] == [IMAGE, "sh", "-c", COMMAND]
    assert {"RANK", "CUDA_VISIBLE_DEVICES"} <= set(argv), "the task's environment, by name"
    workdir = argv[argv.index("-w") + 1]
    assert argv[argv.index("-v") + 1] == f"{workdir}:{workdir}"


async def test_an_image_job_waits_where_no_ready_node_runs_images(
    runtime_stack: Stack, tmp_path: Path
) -> None:
    runtime_stack.env = {
        **runtime_stack.env,
        "CORRAL_CONTAINER_RUNTIME": "",
        "CORRAL_CONTAINER_RUNTIME_COMMAND": "",
    }
    bare = runtime_stack.start_node("bare", home=tmp_path / "bare")
    try:
        await runtime_stack.wait_nodes_ready(2)
        async with runtime_stack.client() as http:
            drained = await http.post("/api/v1/nodes/local/drain", json={"reason": "only bare"})
            assert drained.status_code == 202, drained.text
            # The drained node still runs images: the job is accepted, and waits.
            job_id = await submit_spec(http, _spec("waits"))
            pending = await _reason(http, job_id)
            assert pending["reason"] == "GangDoesNotFit"
            assert pending["detail"].startswith(
                "its tasks run in an image, and no ready node runs container images"
                " (CORRAL_CONTAINER_RUNTIME)"
            ), pending
            host = await submit_spec(http, _spec("on-host", allow_host_execution=True))
            job = await wait_state(http, host, {"SUCCEEDED", "FAILED"}, timeout_s=60)
            assert job["state"] == "SUCCEEDED", job
            assert job["attempts"][0]["node_id"] == "bare"
    finally:
        for process in bare:
            process.terminate()
            process.wait(timeout=30)


async def test_a_cluster_without_runtime_refuses_an_image_job_unless_it_opts_in(stack: Stack) -> None:
    async with stack.client() as http:
        refused = await http.post("/api/v1/jobs", json=_spec("refused"))
        assert refused.status_code == 422, refused.text
        assert "no node of this cluster runs container images" in refused.json()["detail"]
        assert "allow_host_execution: true" in refused.json()["detail"]
        job_id = await submit_spec(http, _spec("on-host", allow_host_execution=True))
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}, timeout_s=60)
        assert job["state"] == "SUCCEEDED", job
        assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text == (
            f"corral: image {IMAGE} was not used: this node has no container runtime, and the job allows"
            " host execution (allow_host_execution); the command runs on the node's host\n"
            "in the image, rank 0\n"
        )


def test_a_node_refuses_a_runtime_whose_command_is_missing(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CORRAL_HOME": str(tmp_path),
        "CORRAL_EXPORTER_BACKEND": "simulated",
        "CORRAL_CONTAINER_RUNTIME": "podman",
        "CORRAL_CONTAINER_RUNTIME_COMMAND": str(tmp_path / "no-such-podman"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "services.monitor.exporter"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"container runtime podman: its command '{tmp_path}/no-such-podman' is not found" in done.stderr


async def _reason(http: httpx.AsyncClient, job_id: str, timeout_s: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
        assert job["state"] == "PENDING", job
        if job["pending"] is not None and job["pending"]["reason"] != "Priority":
            pending: dict[str, Any] = job["pending"]
            return pending
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} was given no pending reason in {timeout_s} s")


REAL_IMAGE = "localhost/corral-e2e-rootfs:1"


def _real_podman_image(root: Path) -> str:
    """A tiny image made from this machine's own shell and libraries, so that no registry is
    needed; skips the test where podman cannot run a container here (and says why)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    for binary in ("/bin/dash", "/usr/bin/id", "/bin/cat"):
        target = root / "bin" / Path(binary).name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(binary, target)
        libraries = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        for library in re.findall(r"(/\S+)", libraries):
            copy = root / library.lstrip("/")
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(library, copy)
    (root / "bin" / "sh").symlink_to("dash")
    for empty in ("proc", "sys", "dev", "tmp", "etc"):
        (root / empty).mkdir(exist_ok=True)
    tar = subprocess.run(["tar", "-C", str(root), "-c", "."], capture_output=True, check=True).stdout
    subprocess.run(
        ["podman", "import", "-", REAL_IMAGE], input=tar, capture_output=True, check=True, timeout=120
    )
    tried = subprocess.run(
        ["podman", "run", "--rm", REAL_IMAGE, "sh", "-c", "echo ok"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if tried.stdout != "ok\n":
        pytest.skip(f"podman cannot run a container on this machine: {tried.stderr.strip()[-300:]}")
    return REAL_IMAGE


@pytest.mark.parametrize(
    "isolation",
    [
        "none",
        pytest.param(
            "sandbox",
            marks=pytest.mark.xfail(
                strict=True,
                reason="the sandbox's seccomp filter refuses CLONE_NEWUSER, which rootless podman needs:"
                " `cannot clone: Operation not permitted` (docs/testing.md)",
            ),
        ),
    ],
)
async def test_a_real_podman_runs_the_task_in_its_image(
    database_url: str, nats_url: str, tmp_path: Path, isolation: str
) -> None:
    image = _real_podman_image(tmp_path / "rootfs")
    env = {
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_NATS_URL": nats_url,
        "CORRAL_CONTAINER_RUNTIME": "podman",
    }
    env["CORRAL_CONTAINER_RUNTIME_GPUS"] = "false"
    if isolation == "none":  # the agent's own user (root here): rootful podman, no sandbox
        env |= {
            "CORRAL_AGENT_SANDBOX_HELPER": str(tmp_path / "no-helper"),
            "CORRAL_AGENT_ALLOW_UNISOLATED": "true",
        }
    async with Stack(tmp_path / "home", env).running() as stack, stack.client() as http:
        spec = _spec("real", allow_host_execution=False)
        # Only what the image has: its own dash, id and cat (no python, no coreutils' ls).
        spec["tasks"][0] |= {
            "image": image,
            "command": 'echo "rank $RANK"; test ! -e /usr/bin/python3 && echo contained',
        }
        job_id = await submit_spec(http, spec)
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}, timeout_s=90)
        logs = (await http.get(f"/api/v1/jobs/{job_id}/logs")).text
        assert job["state"] == "SUCCEEDED", (job, logs)
        assert logs == "rank 0\ncontained\n"
