"""The text of an MPI job's ssh and hostfile files: pure builders, no Kubernetes in them.

What ``mpirun`` needs on the launcher and what a worker's ``sshd`` needs, as file
contents from plain values (host aliases, addresses, ports, paths, keys), so any driver
can write them where its tasks see them: the Kubernetes driver puts them in the job's
Secret (``mpi.py``); a node agent could write the same text into a task's directory.

- Every host is known by an *alias*, ``worker-<i>``: the hostfile names aliases, and the
  ssh config maps each alias to where that worker really listens (``HostName``,
  ``Port``). So the hostfile never changes with addresses or ports, and Open MPI's
  node names match the workers' own hostnames where those are the aliases too.
- The workers' host key is pinned: ``HostKeyAlias`` makes ssh look the alias up in the
  job's ``known_hosts`` (one line per alias, the generation's host public key) with
  ``StrictHostKeyChecking yes``, so a process that answers on a worker's address
  without the job's host key is refused instead of trusted on first use.
- ``BatchMode yes``: no prompt can ever block ``mpirun``; the only way in is the job's
  key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SshHost:
    """One worker as ssh reaches it."""

    alias: str  # what the hostfile and ``ssh <alias>`` name
    address: str  # a DNS name or an IP address
    port: int


def hostfile_text(aliases: Sequence[str], slots: int) -> str:
    """Open MPI's hostfile: one ``<alias> slots=<n>`` line per worker."""
    return "".join(f"{alias} slots={slots}\n" for alias in aliases)


def known_hosts_text(aliases: Sequence[str], host_public_key: str) -> str:
    """The pinned host key under every worker's alias (ssh looks it up by
    ``HostKeyAlias``, so neither the address nor the port enters the line)."""
    return "".join(f"{alias} {host_public_key.strip()}\n" for alias in aliases)


def ssh_config_text(hosts: Sequence[SshHost], *, identity_file: str, known_hosts_file: str) -> str:
    """The client config for ``ssh -F``: a block per worker, then what holds for all."""
    blocks = [
        f"Host {host.alias}\n"
        f"    HostName {host.address}\n"
        f"    Port {host.port}\n"
        f"    HostKeyAlias {host.alias}\n"
        for host in hosts
    ]
    common = (
        "Host *\n"
        f"    IdentityFile {identity_file}\n"
        "    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {known_hosts_file}\n"
        "    GlobalKnownHostsFile /dev/null\n"
        "    StrictHostKeyChecking yes\n"
        "    BatchMode yes\n"
        # A worker's sshd may still be starting when mpirun connects: one try a second.
        "    ConnectionAttempts 10\n"
        "    LogLevel ERROR\n"
    )
    return "".join(blocks) + common


def sshd_config_text(
    *, host_key_file: str, authorized_keys_file: str, listen_address: str | None = None
) -> str:
    """An unprivileged ``sshd``'s config: its own host key and authorized keys, no PID
    file, no PAM, keys only. The port is not in it (``sshd -p``), so workers that
    listen on different ports share one file. ``StrictModes no``: the files belong to
    whoever provides them (root, on a Kubernetes Secret volume), not to the task's user.
    """
    lines = [
        f"HostKey {host_key_file}",
        f"AuthorizedKeysFile {authorized_keys_file}",
        "PidFile none",
        "UsePAM no",
        "StrictModes no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PubkeyAuthentication yes",
        "LogLevel ERROR",
    ]
    if listen_address is not None:
        lines.insert(0, f"ListenAddress {listen_address}")
    return "".join(f"{line}\n" for line in lines)
