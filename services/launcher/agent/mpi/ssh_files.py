"""The texts of an MPI job's ssh wiring, built from its peers (pure: no file is touched).

Every task of the job on a node shares its working directory, so these live once per
job and node, in ``<cwd>/.ssh/``, and every task writes the same texts (the worker's
``sshd_config-<role>-<index>`` is its own). Workers are named ``worker-<index>`` in
the hostfiles and the ssh config: the launcher's ``mpirun`` never sees a port or an
address, and a worker's address may be one that others share (the local driver puts
every worker on 127.0.0.1, each on its own port).

The workers present the job's host key, pinned in ``known_hosts`` under one alias
(``HostKeyAlias``) for all of them: ``StrictHostKeyChecking yes`` then refuses any other
process that took a worker's port first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from services.launcher.agent.environment import Peer
from shared.mpi_spec import SSH_PORT_LABEL, WORKER_ROLE

# Values a quoted sshd_config / ssh_config argument cannot hold: OpenSSH's parser takes
# '"' and '\' as quoting, and a line break ends the directive.
_UNQUOTABLE = frozenset('"\\\n\r\0')


@dataclass(frozen=True)
class SshPaths:
    """Where the job's ssh files are on this node (``root``: ``<cwd>/.ssh``)."""

    root: Path

    @property
    def user_key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def user_public_key(self) -> Path:
        return self.root / "id_ed25519.pub"

    @property
    def authorized_keys(self) -> Path:
        return self.root / "authorized_keys"

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def hostfile(self) -> Path:
        """Open MPI's format (``worker-0 slots=4``)."""
        return self.root / "hostfile"

    @property
    def hydra_hostfile(self) -> Path:
        """MPICH Hydra's format (``worker-0:4``)."""
        return self.root / "hostfile.hydra"

    @property
    def ssh_wrapper(self) -> Path:
        """``ssh -F config``, for launchers that take a program, not a command line."""
        return self.root / "ssh"

    def sshd_config(self, role: str, index: int) -> Path:
        return self.root / f"sshd_config-{role}-{index}"


def host_alias(job_id: str) -> str:
    """The one name the job's host key is pinned under."""
    return f"corral-{job_id}"


def worker_name(index: int) -> str:
    return f"worker-{index}"


def _workers_name(peer: Peer) -> str:
    return worker_name(peer.index)


def workers_of(peers: Iterable[Peer]) -> list[Peer]:
    """The job's workers in index order: the order of the hostfile and of the ranks."""
    return sorted((p for p in peers if p.role == WORKER_ROLE), key=lambda p: p.index)


def ssh_port(peer: Peer) -> int:
    ports = peer.ports.get(SSH_PORT_LABEL) or []
    if not ports:
        raise ValueError(f"{peer.role}-{peer.index} has no {SSH_PORT_LABEL!r} port")
    return ports[0]


def quoted(value: str) -> str | None:
    """``value`` as one double-quoted OpenSSH config argument, or None when no quoting
    carries it safely."""
    if any(ch in _UNQUOTABLE for ch in value):
        return None
    return f'"{value}"'


def _path_argument(path: Path, *, tokens: bool = True) -> str:
    """A path for an option that expands ``%`` tokens (``tokens``), or one that does not."""
    text = quoted(str(path).replace("%", "%%") if tokens else str(path))
    if text is None:
        raise ValueError(f"the path {str(path)!r} cannot go in an ssh config (holds a quote or line break)")
    return text


def hostfile_text(workers: list[Peer], slots: int) -> str:
    return "".join(f"{worker_name(w.index)} slots={slots}\n" for w in workers)


def hydra_hostfile_text(workers: list[Peer], slots: int) -> str:
    return "".join(f"{worker_name(w.index)}:{slots}\n" for w in workers)


def known_hosts_text(job_id: str, host_public_key: str) -> str:
    return f"{host_alias(job_id)} {host_public_key.strip()}\n"


def ssh_config_text(
    job_id: str,
    workers: list[Peer],
    user: str,
    paths: SshPaths,
    name: Callable[[Peer], str] = _workers_name,
) -> str:
    """The client config ``mpirun``'s ssh uses (``ssh -F``): each worker by its name
    (``name``: a generic job's tasks are ``ROLE-INDEX``)."""
    lines: list[str] = []
    for worker in workers:
        lines += [
            f"Host {name(worker)}",
            f"  HostName {worker.host}",
            f"  Port {ssh_port(worker)}",
            f"  HostKeyAlias {host_alias(job_id)}",
            f"  User {user}",
            "",
        ]
    lines += [
        "Host *",
        f"  IdentityFile {_path_argument(paths.user_key)}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {_path_argument(paths.known_hosts)}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  LogLevel ERROR",
    ]
    return "\n".join(lines) + "\n"


def ssh_wrapper_text(paths: SshPaths) -> str:
    config = str(paths.config).replace("'", "'\\''")
    return f"#!/bin/sh\nexec ssh -F '{config}' \"$@\"\n"


def sshd_config_text(
    worker: Peer,
    user: str,
    paths: SshPaths,
    session_env: Mapping[str, str],
    also_listen: Sequence[str] = (),
) -> str:
    """One worker's unprivileged sshd: its port and address (and ``also_listen``), the
    job's host key and user key, no password, no forwarding; ``session_env`` (the
    worker's own variables) in every session it starts, so the ranks see the worker's
    GPUs, PATH and job variables (sshd starts sessions with a bare environment otherwise)."""
    lines = [
        f"Port {ssh_port(worker)}",
        *(f"ListenAddress {address}" for address in dict.fromkeys([worker.host, *also_listen])),
        f"HostKey {_path_argument(paths.host_key, tokens=False)}",
        f"AuthorizedKeysFile {_path_argument(paths.authorized_keys)}",
        "PidFile none",
        "UsePAM no",
        "StrictModes no",  # (the files are the task's, in a directory the agent made)
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        f"AllowUsers {user}",
        "PermitRootLogin no",
        "X11Forwarding no",
        "AllowTcpForwarding no",
        "LogLevel ERROR",
    ]
    carried: list[str] = []
    for name, value in sorted(session_env.items()):
        argument = quoted(value)
        if argument is None:
            lines.append(
                f"# {name} is not carried into ssh sessions: its value holds a quote, '\\' or line break"
            )
        else:
            carried.append(f"{name}={argument}")
    if carried:
        # One line: sshd keeps the first SetEnv directive it reads and ignores the rest.
        lines.append("SetEnv " + " ".join(carried))
    return "\n".join(lines) + "\n"
