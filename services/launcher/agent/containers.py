"""Tasks that name an image run inside it: the task's command becomes the node's container
runtime's invocation (``shared/container_runtime.py`` says which runtime a node has).

The runtime is started as the task's command, in the task's place: in its sandbox, as its
identity, in its cgroup and mount namespace, with its log, pid and exit files, and stopped
as any task is (the agent signals the process group; the runtime passes the signal on and
removes its container). So nothing of a task's isolation depends on the runtime: it only
puts the image's filesystem under the command.

What the invocation gives the container:

- podman and docker: ``run --rm --name corral-<attempt> --network host`` (a task's ports are
  the node's, as Corral placed them), ``--user`` the identity the task runs as (worked out
  by the shell when the command starts: the sandbox picks the uid; rootless podman also
  gets ``--userns keep-id``, so that the uid is the task's inside too), its working directory
  bound at the same path and entered, its storage binds at /mnt/NAME, ``--shm-size`` when
  the task asks for one, its GPUs as CDI devices (``--device nvidia.com/gpu=INDEX``), and
  its environment by name (``-e NAME``: the runtime copies the value from its own
  environment, which is the task's, so no value — a secret — is ever in an argv).
- apptainer: ``exec --containall`` (nothing of the host but what is bound), the working
  directory and storage bound, ``--nv`` for GPUs, and the environment through
  ``APPTAINERENV_NAME`` variables set by the wrapper shell from the task's own, again by name.

The image's command line is ``sh -c COMMAND``: the same shell semantics as a task without an
image, so a command moves between the two unchanged.

A task naming an image on a node without a runtime runs on the host only when its job sets
``allow_host_execution``, and its log says so on its first line; otherwise its start fails
(the scheduler places such jobs only on nodes that run images: this is the guard against a
node whose runtime went away since).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from services.launcher.agent.storage_mounts import TaskMounts
from services.launcher.agent.tasks import Task
from shared.container_runtime import ContainerRuntimeSettings
from shared.jobs import JobSpec, TaskRole

# Variables of the host, not of the task: the image has its own (HOME is set to the
# working directory, as the sandbox does).
_HOST_ONLY = frozenset({"PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "SHELL", "PWD"})
# What the sandbox adds to a task's environment after the agent built it.
_FROM_SANDBOX = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "CORRAL_CPUS")
# The container's devices are the task's GPUs only, numbered from 0 by the runtime: the
# host's indices in CUDA_VISIBLE_DEVICES would name GPUs it does not have.
_CDI_HIDDEN = frozenset({"CUDA_VISIBLE_DEVICES"})


class ImageProblem(OSError):
    """A task's image cannot be run on this node; the message says why. An ``OSError``: the
    agent fails the start with it as with any other start's."""


class TaskImages:
    """What this node does with a task's image (its runtime, or none)."""

    def __init__(self, settings: ContainerRuntimeSettings) -> None:
        self.settings = settings

    def prepare(
        self,
        task: Task,
        spec: JobSpec,
        role: TaskRole,
        env: dict[str, str],
        cwd: Path,
        mounts: TaskMounts,
        *,
        sandboxed: bool,
    ) -> TaskRole:
        """The role to start: ``role`` itself when it names no image, else with its command
        run through the runtime (or, allowed and without a runtime, on the host, said in
        its log)."""
        if role.image is None:
            return role
        if not self.settings.name:
            if not spec.allow_host_execution:
                raise ImageProblem(
                    f"the task runs in image {role.image}, and this node has no container runtime"
                    " (CORRAL_CONTAINER_RUNTIME); the job does not allow host execution"
                )
            assert task.log_path is not None
            task.log_path.parent.mkdir(parents=True, exist_ok=True)
            with task.log_path.open("a") as log:
                log.write(host_execution_note(role.image))
            return role
        if sandboxed and self.settings.name == "docker":
            # dockerd, not the task, would make the container: outside the task's cgroups
            # and mounts, and only through its socket, which is root on the node.
            raise ImageProblem(
                "this node's runtime is docker, whose containers dockerd makes outside the task's"
                " sandbox (and whose socket is root on the node); a sandboxed node runs images with"
                " podman or apptainer (CORRAL_CONTAINER_RUNTIME)"
            )
        names = env_names(env, sandboxed=sandboxed, cdi=self.settings.gpus and bool(task.gpu_indices))
        if sandboxed:
            # The runtime runs inside the sandbox, where the storage already is at its
            # target (and its host source is out of the task's reach).
            mounts = replace(mounts, binds=tuple(replace(b, source=Path(b.target)) for b in mounts.binds))
        command = runtime_command(
            self.settings,
            attempt_id=task.attempt_id,
            image=role.image,
            command=role.command,
            workdir=cwd,
            env_names=names,
            gpu_indices=task.gpu_indices,
            mounts=mounts,
            shm_mb=role.shm_mb,
        )
        return role.model_copy(update={"command": command})


def host_execution_note(image: str) -> str:
    """The first line of the log of a task run on the host in place of its image."""
    return (
        f"corral: image {image} was not used: this node has no container runtime, and the job allows"
        " host execution (allow_host_execution); the command runs on the node's host\n"
    )


def env_names(env: Iterable[str], *, sandboxed: bool, cdi: bool) -> list[str]:
    """The task's variables the container gets, by name."""
    names = set(env) | (set(_FROM_SANDBOX) if sandboxed else set())
    hidden = _HOST_ONLY | (_CDI_HIDDEN if cdi else frozenset())
    return sorted(names - hidden)


def runtime_command(
    settings: ContainerRuntimeSettings,
    *,
    attempt_id: str,
    image: str,
    command: str,
    workdir: Path,
    env_names: list[str],
    gpu_indices: Iterable[int],
    mounts: TaskMounts,
    shm_mb: int | None,
) -> str:
    """The shell command that runs ``command`` in ``image`` with the node's runtime."""
    runtime = shlex.quote(settings.executable)
    inner = ["sh", "-c", command]
    wd = str(workdir)
    gpus = list(gpu_indices) if settings.gpus else []
    if settings.name == "apptainer":
        exports = "".join(f'export APPTAINERENV_{name}="${name}"; ' for name in env_names)
        argv = ["exec", "--containall", "--bind", wd, "--pwd", wd]
        for bind in mounts.binds:
            argv += ["--bind", f"{bind.source}:{bind.target}:{'ro' if bind.read_only else 'rw'}"]
        if gpus:
            argv.append("--nv")
        return f"{exports}exec {runtime} {shlex.join([*argv, image, *inner])}"
    argv = ["run", "--rm", "--name", f"corral-{attempt_id}", "--network", "host"]
    head = f"exec {runtime} {shlex.join(argv)} "
    if settings.name == "podman":
        # Rootless (a sandboxed task's uid): keep-id makes the task's uid its own in the
        # container too, so that it owns its working directory there; rootful podman has no
        # user namespace to keep an id in (and refuses the option).
        head += '$(test "$(id -u)" -eq 0 || echo --userns keep-id) '
    head += '--user "$(id -u):$(id -g)" '
    argv = ["-v", f"{wd}:{wd}", "-w", wd, "-e", f"HOME={wd}"]
    for bind in mounts.binds:
        argv += ["-v", f"{bind.source}:{bind.target}{':ro' if bind.read_only else ''}"]
    for name in env_names:
        argv += ["-e", name]
    if shm_mb is not None:
        argv += ["--shm-size", f"{shm_mb}m"]
    for gpu in gpus:
        argv += ["--device", f"nvidia.com/gpu={gpu}"]
    return head + shlex.join([*argv, image, *inner])
