"""A name and a home for a task's uid: the account files its sandbox shows it.

A dynamic uid (``identities.py``) has no entry in the node's /etc/passwd, and much of
what a task runs asks for one: ``ssh`` ("No user exists for uid ..."), an unprivileged
``sshd`` (it looks up who logs in), ``whoami``, Python's ``getpass``, git. Each start
writes the node's /etc/passwd and /etc/group with one more line for the task's uid
(and its gid, when the node has no such group) into the agent's state directory,
beside the task's pid file; the helper binds them read-only over /etc/passwd and
/etc/group in the task's mount namespace alone (``--passwd``, ``--group``). The node's
own files are never changed, and the copies are root's, in a directory the task cannot
see: nothing the task does reaches another task's view.

Nothing here is a secret (/etc/passwd is world-readable, and /etc/shadow is not
copied). A line is only ever built from fields checked to hold no separator (``:``)
or line break, so a name or a path can never add an account of its own.
"""

from __future__ import annotations

import os
from pathlib import Path

from services.launcher.agent.sandbox.identities import Identity, IdentityProblem

HOST_PASSWD = Path("/etc/passwd")
HOST_GROUP = Path("/etc/group")
SHELL = "/bin/sh"


class AccountEntryProblem(IdentityProblem):
    """A field of the task's account line would corrupt the file; never written."""


def account_files_beside(pid_file: Path) -> tuple[Path, Path]:
    """Where a task's passwd and group files go: next to its pid file, in the agent's
    state (root's, hidden inside every task), named after the attempt like it."""
    return pid_file.with_suffix(".passwd"), pid_file.with_suffix(".group")


def _field(value: str, what: str) -> str:
    if not value or ":" in value or any(ch in value for ch in "\n\r\0"):
        raise AccountEntryProblem(
            f"the task's {what} {value!r} cannot go in /etc/passwd or /etc/group "
            "(empty, or holds ':' or a line break)"
        )
    return value


def _listed(text: str, number: int) -> bool:
    """Whether a line of a passwd or group file has ``number`` as its id (third field)."""
    wanted = str(number)
    return any(line.split(":")[2:3] == [wanted] for line in text.splitlines())


def _appended(text: str, line: str) -> str:
    if text and not text.endswith("\n"):
        text += "\n"
    return f"{text}{line}\n"


def passwd_with(host_passwd: str, identity: Identity, home: Path) -> str | None:
    """``host_passwd`` plus the identity's line (its home ``home``, shell /bin/sh), or
    None when the host already lists its uid."""
    if _listed(host_passwd, identity.uid):
        return None
    name = _field(identity.name, "user name")
    line = f"{name}:x:{identity.uid}:{identity.gid}:Corral task:{_field(str(home), 'home directory')}:{SHELL}"
    return _appended(host_passwd, line)


def group_with(host_group: str, identity: Identity) -> str | None:
    """``host_group`` plus a group named like the identity for its gid, or None when
    the host already has a group of that gid."""
    if _listed(host_group, identity.gid):
        return None
    return _appended(host_group, f"{_field(identity.name, 'group name')}:x:{identity.gid}:")


def write_account_files(
    identity: Identity,
    home: Path,
    pid_file: Path,
    host_passwd: Path = HOST_PASSWD,
    host_group: Path = HOST_GROUP,
) -> dict[str, Path]:
    """Write the task's passwd and group files (those the host's lack the identity in)
    beside ``pid_file``; returns the helper's flags for them (``--passwd``, ``--group``).

    Both texts are built, and so checked, before anything is written."""
    texts = {
        "--passwd": passwd_with(host_passwd.read_text(), identity, home),
        "--group": group_with(host_group.read_text(), identity),
    }
    paths = dict(zip(("--passwd", "--group"), account_files_beside(pid_file), strict=True))
    written: dict[str, Path] = {}
    for flag, text in texts.items():
        if text is None:
            continue
        path = paths[flag]
        path.parent.mkdir(parents=True, exist_ok=True)
        # Not following a link: the directory is root's, but the name is predictable.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as file:
            os.fchmod(fd, 0o644)  # readable by the task through the mount, whatever the umask
            file.write(text)
        written[flag] = path
    return written


def remove_account_files(pid_file: Path) -> None:
    for path in account_files_beside(pid_file):
        path.unlink(missing_ok=True)
