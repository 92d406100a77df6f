"""TensorBoard's event files of another job, copied into a task (``agent/event_files.py``).

The agent copies as root from one job's working directory into another's, both
directories their jobs control: each test tries a way to make that copy read or write
what it must not (a symlink in the source, a symlink planted in the task's own
directory), and shows the copy a task gets is its own and grows as the source does.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.launcher.agent.event_files import EventFileCopy
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.ids import new_attempt_id
from shared.jobs import JobSpec
from tests.launcher.interactive_clients import NODE, running_node, wait_for
from tests.launcher.sandboxes import DYNAMIC_UIDS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")

SOURCE_JOB = "job-01hzzzzzzzzzzzzzzzzzzzzzzz"
EVENTS = "run-1/events.out.tfevents.1700000000.host"


async def _tensorboard_job(db: Database, command: str) -> tuple[str, str]:
    """A one-task job on NODE reading SOURCE_JOB's event files: (attempt, job)."""
    spec = JobSpec.model_validate(
        {
            "name": "board",
            "tasks": [{"name": "worker", "command": command, "event_files_from": SOURCE_JOB}],
        }
    )
    job_id = (await Submitter(JobRepository(db)).submit(spec, "alice", None)).job.id
    await db.execute("UPDATE api.jobs SET state = 'SCHEDULED', generation = 1 WHERE id = $1", job_id)
    attempt_id = new_attempt_id()
    await db.execute(
        "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
        " node_id, gpu_indices, state) VALUES ($1, $2, 1, 'worker', 0, 1, $3, '{}', 'ASSIGNED')",
        attempt_id,
        job_id,
        NODE,
    )
    return attempt_id, job_id


def _source(root: Path) -> Path:
    """SOURCE_JOB's working directory on the node: one event file, a link to a secret."""
    source = root / "work" / SOURCE_JOB
    (source / "run-1").mkdir(parents=True)
    source.chmod(0o700)
    (source / EVENTS).write_bytes(b"scalars 1\n")
    secret = root / "secret"
    secret.write_text("root's secret\n")
    (source / "run-1" / "stolen.tfevents").symlink_to(secret)
    return source


async def test_a_task_gets_its_own_copy_of_the_event_files_and_no_link_is_followed(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    async with running_node(db, bus, tmp_path) as node:
        _source(tmp_path)
        wanted = f"events/{EVENTS}"
        attempt_id, job_id = await _tensorboard_job(
            db, f"until [ -f {wanted} ]; do sleep 0.05; done; cat {wanted}; echo ready; exec sleep 600"
        )
        await node.agent.start_attempt(attempt_id)
        await wait_for(lambda: "ready" in _text(node.log_of(job_id)), "the task to read its copy")
        assert "scalars 1" in _text(node.log_of(job_id))  # the task could read it
        copy = tmp_path / "work" / job_id / wanted
        owner = copy.stat()
        assert DYNAMIC_UIDS[0] <= owner.st_uid <= DYNAMIC_UIDS[1]
        assert (copy.parent.stat().st_uid, (copy.parent.parent).stat().st_uid) == (owner.st_uid, owner.st_uid)
        assert not (copy.parent / "stolen.tfevents").exists()
        assert not (copy.parent / "stolen.tfevents").is_symlink()


def test_a_copy_grows_as_its_source_does(tmp_path: Path) -> None:
    source = _source(tmp_path)
    workdir = tmp_path / "task"
    workdir.mkdir()
    copy = EventFileCopy(source, workdir)
    assert copy.copy_once() == len(b"scalars 1\n")
    with (source / EVENTS).open("ab") as grown:
        grown.write(b"scalars 2\n")
    assert copy.copy_once() == len(b"scalars 2\n")
    assert copy.copy_once() == 0
    assert (workdir / "events" / EVENTS).read_bytes() == b"scalars 1\nscalars 2\n"


def test_a_link_planted_in_the_tasks_directory_is_not_written_through(tmp_path: Path) -> None:
    """The task makes ``events`` a link to a directory of root's: nothing lands there."""
    source = _source(tmp_path)
    workdir = tmp_path / "task"
    workdir.mkdir()
    target = tmp_path / "roots"
    target.mkdir()
    (workdir / "events").symlink_to(target)
    copy = EventFileCopy(source, workdir)
    assert copy.copy_once() == 0
    assert list(target.iterdir()) == []


def test_a_hard_link_to_another_file_is_not_appended_to(tmp_path: Path) -> None:
    source = _source(tmp_path)
    workdir = tmp_path / "task"
    (workdir / "events" / "run-1").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    os.link(victim, workdir / "events" / EVENTS)
    EventFileCopy(source, workdir).copy_once()
    assert victim.read_text() == "keep me\n"


def test_a_copy_stops_at_its_limit(tmp_path: Path) -> None:
    source = _source(tmp_path)
    (source / "run-1" / "big.tfevents").write_bytes(b"x" * 100)
    workdir = tmp_path / "task"
    workdir.mkdir()
    copy = EventFileCopy(source, workdir, limit_bytes=50)
    copy.copy_once()
    assert copy.total == 50
    copied = sum(f.stat().st_size for f in (workdir / "events").rglob("*") if stat.S_ISREG(f.stat().st_mode))
    assert copied == 50


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
