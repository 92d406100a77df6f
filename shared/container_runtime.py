"""A node's container runtime: the setting that says which one it has, read by both of its
processes, and whether the runtime's command is there.

A task that names an image runs inside it, never on the host as if no image had been named.
So the scheduler must know which nodes can run images: the exporter reports the node's
runtime with every heartbeat (``monitor.nodes.container_runtime``, a change is a new
registration, as for GPU sharing), and the agent wraps such a task's command in the
runtime's invocation (``services/launcher/agent/containers.py``). One setting read by
both means the two cannot disagree.

A runtime named whose command is missing is refused when the node starts, never faked
(``runtime_refusal``): a node that said it runs images and then could not would fail every
such task it was given, or worse, be tempted to run them on the host.

Nodes run through Kubernetes register no runtime here: a pod always runs its image, so the
scheduler counts them as running images by their agent's isolation (``pod``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

RuntimeName = Literal["", "podman", "docker", "apptainer"]
RUNTIME_NAMES: tuple[RuntimeName, ...] = ("", "podman", "docker", "apptainer")


class ContainerRuntimeSettings(BaseSettings):
    """Which container runtime this node runs task images with, read by its exporter and
    its agent alike."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_CONTAINER_RUNTIME_", extra="ignore", use_attribute_docstrings=True
    )

    name: RuntimeName = Field(default="", validation_alias=AliasChoices("CORRAL_CONTAINER_RUNTIME"))
    """The node's container runtime (``CORRAL_CONTAINER_RUNTIME``): ``podman``, ``docker`` or
    ``apptainer``; unset: none. Jobs whose tasks name an ``image`` are placed only on nodes
    with one (unless they set ``allow_host_execution``), and run inside the image there."""
    command: str = ""
    """The runtime's command, a path or a name on the agent's ``PATH``; unset: the runtime's
    own name (``podman``, ``docker``, ``apptainer``)."""
    gpus: bool = True
    """Hand a task's GPUs to its container: as CDI devices with podman and docker
    (``--device nvidia.com/gpu=INDEX``; the NVIDIA Container Toolkit generates the CDI
    spec), with ``--nv`` with apptainer. Off for simulated GPUs, which have no device to
    hand over."""

    @property
    def executable(self) -> str:
        """The command that runs the runtime ("" when the node has none)."""
        return self.command or self.name


def runtime_refusal(
    settings: ContainerRuntimeSettings, which: Callable[[str], str | None] = shutil.which
) -> str:
    """Why this node cannot run images with the runtime it names ("" when it can, or names
    none): the runtime's command is not there."""
    if not settings.name:
        if settings.command:
            return (
                f"container runtime command {settings.command!r} is set, but no runtime: set "
                "CORRAL_CONTAINER_RUNTIME to podman, docker or apptainer, or unset "
                "CORRAL_CONTAINER_RUNTIME_COMMAND"
            )
        return ""
    if which(settings.executable) is None:
        return (
            f"container runtime {settings.name}: its command {settings.executable!r} is not found on this "
            f"node (install {settings.name}, or set CORRAL_CONTAINER_RUNTIME_COMMAND to its path); or unset "
            "CORRAL_CONTAINER_RUNTIME, and jobs with an image will not be placed on this node"
        )
    return ""
