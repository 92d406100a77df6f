"""Writing the job's ssh files under ``<cwd>/.ssh``, as the task's uid owns them.

Every task of the job that starts on this node writes the same files (a worker adds its
own ``sshd_config``), so each write is atomic — a temporary file in the directory,
its mode and owner set before it is renamed over the name — and a task that starts
while another rewrites the files reads either text, both the same. The directory is
0700 and the files 0600 (the wrapper 0700): ssh refuses a private key others may read,
and the keys are the job's alone.

The agent runs as root with a sandbox: the files go to the task's uid and gid. Without
one, they stay the agent's user's, which is who the task runs as.

``.ssh`` lies in the job's working directory, which the job's own tasks may change
while another of its tasks starts: a name there may become a link to anywhere on the
host between a check and a use. So root never acts on a name under it: the working
directory and ``.ssh`` are opened without following links, checked by their open
descriptors, and every file is made, owned and renamed relative to ``.ssh``'s
descriptor (``O_EXCL | O_NOFOLLOW``; a rename replaces a planted link, never follows it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from services.launcher.agent.sandbox.identities import Identity

PRIVATE = 0o600
PROGRAM = 0o700
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_owned_directory(name: str, identity: Identity, *, parent_fd: int | None, mode: int | None) -> int:
    """``name`` (relative to ``parent_fd``, or absolute) opened as a directory, made if
    missing; refused if it is a link or owned by anyone but root or the identity; then
    the identity's (and ``mode``'s), through the descriptor."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    try:
        fd = os.open(name, _DIRECTORY, dir_fd=parent_fd)
    except OSError as exc:
        raise OSError(f"{name} is not a directory of its own (a link, or a file): {exc.strerror}") from exc
    try:
        status = os.fstat(fd)
        if not stat.S_ISDIR(status.st_mode) or status.st_uid not in (0, identity.uid, os.geteuid()):
            raise OSError(f"{name} is not the job's directory (owned by uid {status.st_uid})")
        if mode is not None:
            os.fchmod(fd, mode)
        if os.geteuid() == 0:
            os.fchown(fd, identity.uid, identity.gid)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(directory_fd: int, name: str, text: str, identity: Identity, mode: int = PRIVATE) -> None:
    """Replace ``name`` in the directory with ``text`` in one rename, ``mode`` and the identity's."""
    temporary = f".{name}.{secrets.token_hex(6)}"
    fd = os.open(
        temporary,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        mode,
        dir_fd=directory_fd,
    )
    try:
        with os.fdopen(fd, "w") as file:
            os.fchmod(file.fileno(), mode)
            if os.geteuid() == 0:
                os.fchown(file.fileno(), identity.uid, identity.gid)
            file.write(text)
        os.replace(temporary, name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory_fd)
        raise


def write_ssh_files(
    root: Path, texts: dict[Path, str], identity: Identity, programs: frozenset[Path] = frozenset()
) -> None:
    """``root`` (and its parent, the job's working directory) made the identity's, then
    every file of ``texts`` (each directly in ``root``) written in it; those in
    ``programs`` executable."""
    outside = [path for path in texts if path.parent != root]
    if outside:
        raise ValueError(f"not directly in {root}: {outside}")
    root.parent.parent.mkdir(parents=True, exist_ok=True)  # the node's work directory: the agent's
    work_fd = _open_owned_directory(str(root.parent), identity, parent_fd=None, mode=None)
    try:
        ssh_fd = _open_owned_directory(root.name, identity, parent_fd=work_fd, mode=0o700)
    finally:
        os.close(work_fd)
    try:
        for path, text in texts.items():
            write_file(ssh_fd, path.name, text, identity, PROGRAM if path in programs else PRIVATE)
    finally:
        os.close(ssh_fd)
