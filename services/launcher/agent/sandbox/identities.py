"""Who a task runs as: a uid of its own, never root, never the agent's.

``DynamicIdentities`` (the default, systemd's DynamicUser model): each job gets a uid
(and a gid of the same number) from a configured range, on each node it runs on. The
claim is a file in a root-only directory shared by every agent of the machine, made
with ``O_EXCL`` so two agents never hand out one uid. Tasks of one job on one node
share the uid (they share the job's working directory), tasks of different jobs never
do. The uid goes back to the pool only once the job has no task left here: its
processes are gone (its cgroup is empty) and its IPC objects with them (each task has
an IPC namespace of its own, which the kernel removes with its last process). A uid
that some account of this machine already has is skipped.

``AccountIdentities`` (Slurm's model): the job runs as the POSIX account whose name is
the Corral user who submitted it; uids must then agree across machines (LDAP, sssd).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class IdentityProblem(Exception):
    """No identity can be given to a task; the message says why and what to do."""


@dataclass(frozen=True)
class Identity:
    uid: int
    gid: int
    # USER, LOGNAME and the task's passwd entry. A dynamic uid's is the job id: the uid
    # differs from node to node, the name must not (an MPI job's ssh logs in by name).
    name: str


class Identities(Protocol):
    def claim(self, job_id: str, username: str) -> Identity: ...
    def release(self, job_id: str) -> None: ...
    def held(self) -> dict[str, Identity]: ...


class _Accounts:
    """The uids and gids this machine's accounts and groups have, read again only when
    /etc/passwd or /etc/group changed (a claim is one check, not two NSS lookups)."""

    FILES = (Path("/etc/passwd"), Path("/etc/group"))

    def __init__(self) -> None:
        self._stamp: tuple[float, ...] = ()
        self._ids: frozenset[int] = frozenset()

    def taken(self, uid: int) -> bool:
        stamp = tuple(_mtime(f) for f in self.FILES)
        if stamp != self._stamp:
            self._ids = frozenset(a.pw_uid for a in pwd.getpwall()) | frozenset(
                g.gr_gid for g in grp.getgrall()
            )
            self._stamp = stamp
        return uid in self._ids


def _uids_of_processes() -> set[int]:
    uids: set[int] = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                uids.add(entry.stat().st_uid)
    return uids


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class DynamicIdentities:
    """A uid per (job, node) from ``first``..``last``; claims are files in ``claims_dir``."""

    def __init__(self, claims_dir: Path, node_id: str, first: int, last: int) -> None:
        if not 0 < first <= last:
            raise IdentityProblem(f"the dynamic uid range {first}-{last} is empty or includes root (0)")
        self._dir = claims_dir
        self._node = node_id
        self._first, self._last = first, last
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self._dir, 0o700)  # root's alone, even if it existed
        self._held: dict[str, Identity] = self._read_claims()
        self._accounts = _Accounts()
        self._sweep_stale()

    def _owner_line(self, job_id: str) -> str:
        return f"{self._node} {job_id}\n"

    def _read_claims(self) -> dict[str, Identity]:
        """The claims this node made before the agent restarted (its tasks may still run)."""
        held: dict[str, Identity] = {}
        for claim in self._dir.glob("[0-9]*"):
            with contextlib.suppress(OSError, ValueError):
                node, job_id = claim.read_text().split()
                if node == self._node:
                    uid = int(claim.name)
                    held[job_id] = Identity(uid, uid, job_id)
        return held

    def _sweep_stale(self, min_age_s: float = 60.0) -> None:
        """Release other nodes' claims that no process uses and that are older than a
        start takes: their agent died with its tasks gone (a machine reboot empties
        /run anyway), and its uids must not stay out of the pool for good."""
        in_use = _uids_of_processes()
        now = time.time()
        for claim in self._dir.glob("[0-9]*"):
            with contextlib.suppress(OSError, ValueError):
                node, _ = claim.read_text().split()
                if (
                    node != self._node
                    and int(claim.name) not in in_use
                    and now - claim.stat().st_mtime > min_age_s
                ):
                    claim.unlink()

    def claim(self, job_id: str, username: str) -> Identity:
        del username  # a dynamic uid stands for the job, not for an account
        if job_id in self._held:
            return self._held[job_id]
        size = self._last - self._first + 1
        start = zlib.crc32(f"{self._node}/{job_id}".encode()) % size
        for offset in range(size):
            uid = self._first + (start + offset) % size
            if self._accounts.taken(uid):
                continue
            try:
                fd = os.open(self._dir / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w") as claim:
                claim.write(self._owner_line(job_id))
            identity = self._held[job_id] = Identity(uid, uid, job_id)
            return identity
        raise IdentityProblem(
            f"every uid of {self._first}-{self._last} is in use by a running job: "
            "widen CORRAL_AGENT_UID_RANGE"
        )

    def release(self, job_id: str) -> None:
        identity = self._held.pop(job_id, None)
        if identity is not None:
            (self._dir / str(identity.uid)).unlink(missing_ok=True)

    def held(self) -> dict[str, Identity]:
        return dict(self._held)


class AccountIdentities:
    """The submitting user's own POSIX account (never root, never a system account)."""

    def __init__(self, minimum_uid: int = 1000) -> None:
        self._minimum = minimum_uid

    def claim(self, job_id: str, username: str) -> Identity:
        del job_id
        try:
            account = pwd.getpwnam(username)
        except KeyError:
            raise IdentityProblem(
                f"there is no account named {username!r} on this node, and CORRAL_AGENT_RUN_AS=account "
                "runs each job as its submitter's account: create it (or use run_as=dynamic)"
            ) from None
        if account.pw_uid < self._minimum:
            raise IdentityProblem(
                f"the account {username!r} has uid {account.pw_uid}, below {self._minimum}: "
                "tasks never run as root or a system account"
            )
        return Identity(account.pw_uid, account.pw_gid, username)

    def release(self, job_id: str) -> None:
        del job_id

    def held(self) -> dict[str, Identity]:
        return {}
