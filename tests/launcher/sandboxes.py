"""A real task sandbox for tests, and one task through it as the node agent starts it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.launcher.agent.processes import TaskFiles
from services.launcher.agent.sandbox.sandbox import Launch, Sandbox, SandboxConfig, open_sandbox
from shared.jobs import Resources

DYNAMIC_UIDS = (2130706432, 2130771967)  # the default CORRAL_AGENT_UID_RANGE


def sandbox_for_tests(tmp_path: Path, **config: Any) -> Sandbox:
    """A sandbox of a node of its own (closed by the caller), its uid claims in ``tmp_path``."""
    settings: dict[str, Any] = {
        "node_id": f"test-{uuid.uuid4().hex[:8]}",
        "hidden": (),
        "claims_dir": tmp_path / "claims",
        "uid_range": DYNAMIC_UIDS,
        "run_as": "dynamic",
        "pids_max": 64,
        **config,
    }
    return open_sandbox(SandboxConfig(**settings))


@dataclass(frozen=True)
class PreparedTask:
    launch: Launch
    files: TaskFiles
    attempt_id: str
    job_id: str
    log: Path


def prepare_task(
    sandbox: Sandbox, tmp_path: Path, command: str, *, gpus: list[int] | None = None, **resources: Any
) -> PreparedTask:
    """``Sandbox.prepare`` for one task of a job of its own, its files in ``tmp_path``."""
    attempt = f"att-{uuid.uuid4().hex[:12]}"
    files = TaskFiles.for_attempt(tmp_path / "state", attempt)
    files.pid_file.parent.mkdir(exist_ok=True)
    log = tmp_path / f"{attempt}.log"
    launch = sandbox.prepare(
        attempt_id=attempt,
        job_id=f"job-{attempt}",
        username="alice",
        resources=Resources(**{"cpus": 1, "memory_mb": 128, **resources}),
        gpu_indices=gpus or [],
        workdir=tmp_path / "work" / attempt,
        log_path=log,
        pid_file=files.pid_file,
        exit_file=files.exit_file,
        command=command,
    )
    return PreparedTask(launch, files, attempt, f"job-{attempt}", log)
