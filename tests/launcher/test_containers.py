"""A task's image: the exact invocation each runtime gets (golden argv, recorded by the FAKE
runtime of tests/fake_container_runtime.py, which then runs the command itself), secrets
passed by name only, and what a node without a runtime does with an image."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from services.launcher.agent.containers import ImageProblem, TaskImages, env_names, runtime_command
from services.launcher.agent.sandbox.storage import Bind
from services.launcher.agent.storage_mounts import TaskMounts
from services.launcher.agent.tasks import Task
from shared.container_runtime import ContainerRuntimeSettings, RuntimeName, runtime_refusal
from shared.jobs import JobSpec
from tests import fake_container_runtime

IMAGE = "pytorch/pytorch:2.4.0"
COMMAND = "echo \"rank $RANK in $(pwd)\" > out.txt; echo 'quoted; still one command'"
ATTEMPT = "att-01jd0000000000000000000000"
Call = dict[str, Any]
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/home/agent", "RANK": "3", "API_TOKEN": "s3cr3t-value"}


def _run(
    runtime: RuntimeName, tmp_path: Path, *, gpus: tuple[int, ...] = (), shm_mb: int | None = None
) -> Call:
    settings = ContainerRuntimeSettings(
        CORRAL_CONTAINER_RUNTIME=runtime, command=str(fake_container_runtime.EXECUTABLE)
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    command = runtime_command(
        settings,
        attempt_id=ATTEMPT,
        image=IMAGE,
        command=COMMAND,
        workdir=workdir,
        env_names=env_names(ENV, sandboxed=False, cdi=bool(gpus)),
        gpu_indices=gpus,
        mounts=TaskMounts((Bind(tmp_path, "/mnt/data", read_only=True),)),
        shm_mb=shm_mb,
    )
    assert "s3cr3t-value" not in command, "a value of the environment is never in an argv"
    subprocess.run(["/bin/sh", "-c", command], env=ENV, cwd=workdir, check=True, timeout=30)
    [call] = fake_container_runtime.calls(workdir)
    assert (workdir / "out.txt").read_text() == f"rank 3 in {workdir}\n", "the fake ran the command"
    call["workdir"] = str(workdir)
    return call


def test_podman_runs_the_command_in_the_image_as_the_task_with_its_workdir_env_shm_and_gpus(
    tmp_path: Path,
) -> None:
    call = _run("podman", tmp_path, gpus=(2, 5), shm_mb=2048)
    wd = call["workdir"]
    assert call["argv"] == [
        "run", "--rm", "--name", f"corral-{ATTEMPT}", "--network", "host",
        *(["--userns", "keep-id"] if os.getuid() else []),  # (rootless only)
        "--user", f"{os.getuid()}:{os.getgid()}",
        "-v", f"{wd}:{wd}", "-w", wd, "-e", f"HOME={wd}",
        "-v", f"{tmp_path}:/mnt/data:ro",
        "-e", "API_TOKEN", "-e", "RANK",
        "--shm-size", "2048m",
        "--device", "nvidia.com/gpu=2", "--device", "nvidia.com/gpu=5",
        IMAGE, "sh", "-c", COMMAND,
    ]  # fmt: skip
    # -e NAME: the runtime copies the value from its own environment, the task's.
    assert call["env"]["API_TOKEN"] == "s3cr3t-value"


def test_docker_gets_the_same_invocation_without_rootless_podmans_user_namespace(tmp_path: Path) -> None:
    call = _run("docker", tmp_path)
    wd = call["workdir"]
    assert call["argv"] == [
        "run", "--rm", "--name", f"corral-{ATTEMPT}", "--network", "host",
        "--user", f"{os.getuid()}:{os.getgid()}",
        "-v", f"{wd}:{wd}", "-w", wd, "-e", f"HOME={wd}",
        "-v", f"{tmp_path}:/mnt/data:ro",
        "-e", "API_TOKEN", "-e", "RANK",
        IMAGE, "sh", "-c", COMMAND,
    ]  # fmt: skip


def test_apptainer_contains_all_and_passes_the_environment_by_apptainerenv(tmp_path: Path) -> None:
    call = _run("apptainer", tmp_path, gpus=(0,))
    wd = call["workdir"]
    assert call["argv"] == [
        "exec", "--containall", "--bind", wd, "--pwd", wd,
        "--bind", f"{tmp_path}:/mnt/data:ro",
        "--nv",
        IMAGE, "sh", "-c", COMMAND,
    ]  # fmt: skip
    assert call["env"]["APPTAINERENV_API_TOKEN"] == "s3cr3t-value"
    assert call["env"]["APPTAINERENV_RANK"] == "3"
    assert "APPTAINERENV_PATH" not in call["env"], "the image keeps its own PATH"


def test_the_container_sees_its_gpus_numbered_from_zero_and_the_sandboxs_variables() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "2,5", "RANK": "0", "PATH": "/bin"}
    assert env_names(env, sandboxed=False, cdi=True) == ["RANK"]
    assert env_names(env, sandboxed=False, cdi=False) == ["CUDA_VISIBLE_DEVICES", "RANK"]
    assert env_names({}, sandboxed=True, cdi=False) == [
        "CORRAL_CPUS",
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
    ]


def _spec(*, allow_host: bool) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "t",
            "allow_host_execution": allow_host,
            "tasks": [{"name": "main", "command": "true", "image": IMAGE}],
        }
    )


def test_a_node_without_runtime_runs_an_image_task_on_the_host_only_when_allowed_and_says_so(
    tmp_path: Path,
) -> None:
    images = TaskImages(ContainerRuntimeSettings())
    task = Task(attempt_id=ATTEMPT, log_path=tmp_path / "logs" / "attempt-1.log")
    allowed = _spec(allow_host=True)
    role = images.prepare(task, allowed, allowed.tasks[0], {}, tmp_path, TaskMounts(), sandboxed=False)
    assert role == allowed.tasks[0], "the command is run as it is"
    assert task.log_path is not None
    assert task.log_path.read_text() == (
        f"corral: image {IMAGE} was not used: this node has no container runtime, and the job allows"
        " host execution (allow_host_execution); the command runs on the node's host\n"
    )
    refused = _spec(allow_host=False)
    with pytest.raises(ImageProblem, match="this node has no container runtime"):
        images.prepare(task, refused, refused.tasks[0], {}, tmp_path, TaskMounts(), sandboxed=False)


def test_a_task_without_image_runs_as_it_always_did(tmp_path: Path) -> None:
    images = TaskImages(ContainerRuntimeSettings(CORRAL_CONTAINER_RUNTIME="podman"))
    spec = JobSpec.model_validate({"name": "t", "tasks": [{"name": "main", "command": "true"}]})
    task = Task(attempt_id=ATTEMPT)
    assert (
        images.prepare(task, spec, spec.tasks[0], {}, tmp_path, TaskMounts(), sandboxed=True) is spec.tasks[0]
    )


def test_a_runtime_whose_command_is_missing_is_refused() -> None:
    missing = ContainerRuntimeSettings(CORRAL_CONTAINER_RUNTIME="podman", command="/nonexistent/podman")
    assert runtime_refusal(missing) == (
        "container runtime podman: its command '/nonexistent/podman' is not found on this node (install"
        " podman, or set CORRAL_CONTAINER_RUNTIME_COMMAND to its path); or unset CORRAL_CONTAINER_RUNTIME,"
        " and jobs with an image will not be placed on this node"
    )
    assert runtime_refusal(ContainerRuntimeSettings(CORRAL_CONTAINER_RUNTIME="docker"), which=lambda _: None)
    assert (
        runtime_refusal(ContainerRuntimeSettings(CORRAL_CONTAINER_RUNTIME="docker"), which=lambda c: c) == ""
    )
    assert runtime_refusal(ContainerRuntimeSettings()) == ""


def test_docker_is_refused_on_a_sandboxed_node(tmp_path: Path) -> None:
    """dockerd, not the task, would make the container: outside the task's sandbox."""
    images = TaskImages(ContainerRuntimeSettings(CORRAL_CONTAINER_RUNTIME="docker"))
    spec = _spec(allow_host=False)
    task = Task(attempt_id=ATTEMPT)
    with pytest.raises(
        ImageProblem, match="docker, whose containers dockerd makes outside the task's sandbox"
    ):
        images.prepare(task, spec, spec.tasks[0], {}, tmp_path, TaskMounts(), sandboxed=True)
