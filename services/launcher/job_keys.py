"""A job's ssh keys, one set per generation (migration 0035): an MPI job's, or a generic
job's with ``ssh`` (``shared/ssh_spec.py``; every task of such a job holds both pairs).

The launcher makes them with the generation's attempts, in the same transaction, so a
node that claims a task of the generation finds them; a retry (a new generation) gets a
fresh set, and an ended generation's keys are deleted with the next one's or with the
job. Two ed25519 pairs: the *user* key, with which the launcher's ``ssh`` logs in to the
workers' ``sshd``, and the *host* key, which every worker's ``sshd`` presents and every
task pins in its ``known_hosts`` (services/launcher/agent/mpi/), so another process on a
node that binds a worker's port first cannot pose as it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from services.launcher.repository import SQL
from shared.db.pool import Connection
from shared.mpi_spec import MPI_FRAMEWORKS


def has_job_keys(spec: Mapping[str, Any]) -> bool:
    """Whether a job (its stored spec) gets keys: an MPI job, or one with ``ssh``."""
    return spec.get("framework") in MPI_FRAMEWORKS or spec.get("ssh") is not None


@dataclass(frozen=True)
class KeyPair:
    private: str  # OpenSSH's private key format, unencrypted (the file is 0600, the job's)
    public: str  # one authorized_keys / known_hosts line: "ssh-ed25519 AAAA… comment"


def new_key_pair(comment: str) -> KeyPair:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return KeyPair(private, f"{public.decode()} {comment}")


async def make_job_keys(conn: Connection, job_id: str, generation: int) -> None:
    """The generation's keys, unless it has them already (a redelivered placement);
    an earlier generation's are deleted."""
    await conn.execute(SQL.delete_older_job_keys, job_id, generation)
    user = new_key_pair(f"corral-{job_id}")
    host = new_key_pair(f"corral-{job_id}-host")
    await conn.execute(
        SQL.insert_job_keys,
        job_id,
        generation,
        user.private,
        user.public,
        host.private,
        host.public,
    )


async def forget_job_keys(conn: Connection, job_id: str) -> None:
    """The job is over: no node needs its keys again."""
    await conn.execute(SQL.delete_job_keys, job_id)
