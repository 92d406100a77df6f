"""The node agent on real Postgres with real processes fetches a task's sources before
its command runs, as the task's own identity; a fetch that fails fails the start, its
reason and classification recorded as the job shows them."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.launcher.agent.agent import NodeAgent
from services.launcher.agent.sandbox.sandbox import Sandbox
from shared.db.pool import Database
from shared.ids import new_attempt_id
from shared.jobs import JobSpec
from tests.launcher import attempts
from tests.launcher.test_fetching import make_repo

NODE = "gpu-5"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory every uid may pass through (outside root's private /tmp/pytest-of-root)."""
    directory = Path(tempfile.mkdtemp(prefix="corral-fetch-agent-", dir="/var/lib"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


async def _assigned(db: Database, command: str, fetch: list[dict[str, Any]]) -> str:
    """A job fetching ``fetch``, submitted, its one attempt ASSIGNED to NODE."""
    spec = JobSpec.model_validate(
        {
            "name": "train",
            "tasks": [
                {
                    "name": "main",
                    "command": command,
                    "resources": {"gpus": 0, "memory_mb": 256},
                    "fetch": fetch,
                }
            ],
        }
    )
    job_id = (await Submitter(JobRepository(db)).submit(spec, "alice", None)).job.id
    await db.execute("UPDATE api.jobs SET state = 'SCHEDULED', generation = 1 WHERE id = $1", job_id)
    attempt_id = new_attempt_id()
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
        " node_id, gpu_indices, state, ports) VALUES ($1, $2, 1, 'main', 0, 1, $3, '{}', 'ASSIGNED', '{}')",
        attempt_id,
        job_id,
        NODE,
    )
    return attempt_id


async def _ended(db: Database, attempt_id: str) -> dict[str, Any]:
    for _ in range(600):
        row = await db.fetchrow(
            "SELECT state, exit_code, classification, reason FROM launcher.attempts WHERE id = $1", attempt_id
        )
        assert row is not None
        if row["state"] == "EXITED":
            return dict(row)
        await asyncio.sleep(0.05)
    raise AssertionError(f"attempt {attempt_id} did not end within 30 s")


async def _run(
    db: Database, root: Path, attempt_ids: list[str], sandbox: Sandbox | None = None
) -> list[dict[str, Any]]:
    async with asyncio.TaskGroup() as tg:
        agent = NodeAgent(
            db,
            tg,
            node_id=NODE,
            log_dir=root / "logs",
            state_dir=root / "state",
            work_dir=root / "work",
            sandbox=sandbox,
        )
        await agent.register(lease_s=30)
        for attempt_id in attempt_ids:
            await agent.start_attempt(attempt_id)
        return [await _ended(db, attempt_id) for attempt_id in attempt_ids]


async def test_the_task_runs_in_the_commit_it_fetched(db: Database, tmp_path: Path) -> None:
    await attempts.known_nodes(db, NODE)
    first, _ = make_repo(tmp_path / "repo")
    fetch = [{"uri": f"file://{tmp_path / 'repo'}", "kind": "git", "version": first, "path": "script_train"}]
    attempt_id = await _assigned(db, "cd script_train && git rev-parse HEAD && python3 train.py", fetch)
    [ended] = await _run(db, tmp_path, [attempt_id])
    assert ended["exit_code"] == 0, ended
    [log] = list((tmp_path / "logs").rglob("attempt-1.log"))
    assert log.read_text().split() == [first, "one"]


async def test_a_failed_fetch_fails_the_start_saying_why(db: Database, tmp_path: Path) -> None:
    await attempts.known_nodes(db, NODE)
    make_repo(tmp_path / "repo")
    repo = f"file://{tmp_path / 'repo'}"
    missing_version = await _assigned(
        db, "touch ran-anyway", [{"uri": repo, "kind": "git", "version": "v9", "path": "code"}]
    )
    unreachable = await _assigned(
        db, "touch ran-anyway", [{"uri": "http://127.0.0.1:9/data.tgz", "kind": "archive", "path": "data"}]
    )
    refused, failed = await _run(db, tmp_path, [missing_version, unreachable])
    assert refused["reason"] == f"could not fetch {repo}: version 'v9' is not a commit, tag or branch of it"
    assert (refused["exit_code"], refused["classification"]) == (None, "permanent")  # fetch_refused
    assert failed["reason"].startswith("could not fetch http://127.0.0.1:9/data.tgz: could not download it:")
    assert (failed["exit_code"], failed["classification"]) == (None, "unknown")  # fetch_failed: max_retries
    assert not list((tmp_path / "work").rglob("ran-anyway"))


@root_only
async def test_a_sandboxed_task_fetches_as_itself(db: Database, outside: Path, sandbox: Sandbox) -> None:
    """Its fetch reads only what its uid may (root's files are refused), and what it
    fetched is its own to change."""
    await attempts.known_nodes(db, NODE)
    secret = Path(tempfile.mkdtemp(prefix="corral-secret-", dir="/root"))
    try:
        (secret / "key").write_text("root's own\n")
        make_repo(outside / "repo")
        stolen = await _assigned(
            db, "cat stolen", [{"uri": f"file://{secret / 'key'}", "kind": "file", "path": "stolen"}]
        )
        own = await _assigned(
            db,
            "echo changed >> code/train.py && stat -c %u code/train.py && id -u",
            [{"uri": f"file://{outside / 'repo'}", "kind": "git", "version": "v1", "path": "code"}],
        )
        blocked, ran = await _run(db, outside, [stolen, own], sandbox)
    finally:
        shutil.rmtree(secret, ignore_errors=True)
    assert (
        blocked["reason"]
        == f"could not fetch file://{secret / 'key'}: permission denied: the task's user may not read it"
    )
    assert blocked["classification"] == "permanent"
    assert ran["exit_code"] == 0, ran
    [log] = [p for p in (outside / "logs").rglob("attempt-1.log") if p.read_text().strip()]
    owner, me = log.read_text().split()
    assert owner == me != "0"
