"""MPI and Horovod jobs and their peers, as a claim gives them to the agent."""

from __future__ import annotations

import contextlib
import os
import pwd
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from services.launcher.agent.environment import Peer
from services.launcher.job_keys import new_key_pair
from shared.jobs import JobSpec

JOB_ID = "job-01jz0000000000000000000mpi"


def mpi_spec(
    framework: str = "mpi", workers: int = 2, gpus: int = 0, mpi: dict[str, Any] | None = None
) -> JobSpec:
    document: dict[str, Any] = {
        "name": "allreduce",
        "framework": framework,
        "tasks": [
            {"name": "launcher", "instances": 1, "command": "mpirun hostname"},
            {
                "name": "worker",
                "instances": workers,
                "resources": {"gpus": gpus},
                "env": {"NCCL_DEBUG": "INFO"},
            },
        ],
    }
    if mpi is not None:
        document["mpi"] = mpi
    return JobSpec.model_validate(document)


def ssh_keys() -> dict[str, str]:
    """A fresh set, as ``claim_attempt``'s ``ssh_keys`` holds it."""
    user = new_key_pair(f"corral-{JOB_ID}")
    host = new_key_pair(f"corral-{JOB_ID}-host")
    return {
        "user_private_key": user.private,
        "user_public_key": user.public,
        "host_private_key": host.private,
        "host_public_key": host.public,
    }


def loopback_peers(worker_ports: list[int], launcher_ports: dict[str, list[int]] | None = None) -> list[Peer]:
    """A launcher and one worker per port, every one on 127.0.0.1 (the local driver)."""
    launcher = Peer("launcher", 0, "node-a", "127.0.0.1", launcher_ports or {"master": [29500]})
    workers = [
        Peer("worker", i, "node-a", "127.0.0.1", {"ssh": [port]}) for i, port in enumerate(worker_ports)
    ]
    return [launcher, *workers]


def login_account() -> pwd.struct_passwd | None:
    """An unprivileged account of this machine with a shell (an sshd session runs the
    user's shell), or None: the tests that run sshd as a task would are skipped then."""
    for account in pwd.getpwall():
        if account.pw_uid >= 1000 and account.pw_uid != 65534 and account.pw_shell.endswith("sh"):
            return account
    return None


@contextlib.contextmanager
def reachable_dir() -> Iterator[Path]:
    """A scratch directory another uid can enter (pytest's ``tmp_path`` is root's 0700)."""
    with tempfile.TemporaryDirectory(prefix="corral-mpi-") as scratch:
        os.chmod(scratch, 0o755)  # noqa: S103 - the task's uid must enter it
        yield Path(scratch)
