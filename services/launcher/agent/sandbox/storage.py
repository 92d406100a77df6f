"""A task's storage and /dev/shm as the sandbox helper takes them (``--bind``, ``--shm-mb``).

A ``Bind`` is one host directory the task sees at ``/mnt/NAME``, read-only or writable;
the helper mounts a tmpfs of root's over ``/mnt`` first, so the task sees there only
what it asked for. Paths are checked here as the helper checks them again: absolute and
plain (no ``.``, ``..`` or empty part), the target one name under ``/mnt``, and no ``:``
(the helper's argument separates on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shared.storage_spec import STORAGE_MOUNT_ROOT, check_absolute_path


@dataclass(frozen=True)
class Bind:
    source: Path  # a directory on the node
    target: str  # /mnt/NAME inside the task
    read_only: bool

    def __post_init__(self) -> None:
        check_absolute_path(str(self.source), "a storage's source")
        check_absolute_path(self.target, "a storage's mount path")
        parent, _, name = self.target.rpartition("/")
        if parent != STORAGE_MOUNT_ROOT or not name:
            raise ValueError(f"a storage's mount path is {STORAGE_MOUNT_ROOT}/NAME, not {self.target!r}")

    @property
    def argument(self) -> str:
        return f"{self.source}:{self.target}:{'ro' if self.read_only else 'rw'}"


def storage_argv(binds: Sequence[Bind], shm_mb: int | None) -> list[str]:
    """The helper's flags for these binds and this /dev/shm size (None: tmpfs's default)."""
    argv: list[str] = []
    for bind in binds:
        argv += ["--bind", bind.argument]
    if shm_mb is not None:
        argv += ["--shm-mb", str(shm_mb)]
    return argv
