"""Named storage a job mounts (``storage``): part of the job spec (``shared/jobs.py``).

An admin defines storage configs (``/api/v1/storage``): a name, a kind (``hostpath``: a
directory present on every node; ``nfs``: an export each node mounts), whether it is
read-only, and the groups whose members may use it. A job names the configs it uses;
each is mounted into every task's mount namespace at ``/mnt/NAME`` (OpenPAI's
``teamwise_storage`` path). A name that does not exist, or that none of the submitter's
groups may use, is refused at submit.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

STORAGE_NAME_PATTERN = r"^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$"
STORAGE_MOUNT_ROOT = "/mnt"


class StorageUse(BaseModel):
    """One storage config a job mounts."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=STORAGE_NAME_PATTERN, description="a storage config's name")]
    read_only: bool = Field(
        default=False, description="mount it read-only even where the config allows writing"
    )

    @property
    def mount_path(self) -> str:
        return f"{STORAGE_MOUNT_ROOT}/{self.name}"


StorageKind = Literal["hostpath", "nfs"]
STORAGE_KINDS: tuple[StorageKind, ...] = ("hostpath", "nfs")
# An NFS server: a host name, an IPv4 address, or an IPv6 address in brackets.
_NFS_SERVER = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\])$")


def check_absolute_path(path: str, what: str) -> str:
    """``path`` when it is absolute and plain (no ``.`` or ``..`` part, no empty part, no
    trailing slash, nothing but printable characters other than ``:`` and ``,``, which
    mount options and the sandbox helper's arguments separate on); else ``ValueError``."""
    if not path.startswith("/") or path == "/":
        raise ValueError(f"{what} must be an absolute path below / (e.g. /srv/datasets), not {path!r}")
    if any(not c.isprintable() or c in ":," for c in path):
        raise ValueError(f"{what} {path!r} may not hold ':', ',' or control characters")
    if any(part in ("", ".", "..") for part in path[1:].split("/")):
        raise ValueError(f"{what} {path!r} must be plain: no '.', '..', '//' or trailing '/'")
    return path


def check_source(kind: str, source: str) -> str:
    """``source`` when it suits ``kind`` (a ``hostpath``'s absolute directory, an ``nfs``
    config's ``server:/export``); else ``ValueError`` saying what is expected."""
    if kind == "hostpath":
        return check_absolute_path(source, "a hostpath source")
    if kind == "nfs":
        server, _, export = source.rpartition(":")
        if not server or not _NFS_SERVER.match(server):
            raise ValueError(
                f"an nfs source is SERVER:/EXPORT (e.g. nfs1.example.com:/datasets), not {source!r}"
            )
        check_absolute_path(export, "an nfs export")
        return source
    raise ValueError(f"kind must be one of {', '.join(STORAGE_KINDS)}, not {kind!r}")
