"""What a node serves of its task logs (services/launcher/task_logs.py): the piece asked
for of an attempt's log in its own layout, and nothing else — a request whose names
would lead out of the log dir (``..``, ``/``, a link) is refused and nothing is read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.launcher.task_logs import LogServer, RefusedLogRequest, attempt_log_path
from shared.node_logs import CHUNK_BYTES, LogChunk, LogRequest

JOB = "job-01hzzzzzzzzzzzzzzzzzzzzzzz"


def request(**fields: object) -> bytes:
    base: dict[str, object] = {
        "attempt_id": "att-1",
        "job_id": JOB,
        "task_role": "worker",
        "task_index": 0,
        "attempt_no": 1,
    }
    return json.dumps({**base, **fields}).encode()


async def ask(server: LogServer, **fields: object) -> LogChunk:
    return LogChunk.model_validate_json(await server.answer(request(**fields)))


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """A node's log dir with one attempt's log, and a secret beside it (outside)."""
    logs = tmp_path / "logs"
    path = attempt_log_path(logs, JOB, "worker", 0, 1)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"line 1\nline 2\n")
    (tmp_path / "worker-0").mkdir()
    (tmp_path / "worker-0" / "attempt-1.log").write_text("the secret of ../worker-0\n")
    (tmp_path / "secret").write_text("root's secret\n")
    return logs


async def test_a_node_serves_the_piece_asked_for_and_says_how_big_the_log_is(log_dir: Path) -> None:
    server = LogServer(log_dir, retention_hours=168)
    whole = await ask(server)
    assert (whole.exists, whole.size, whole.data, whole.error) == (True, 14, b"line 1\nline 2\n", None)
    piece = await ask(server, offset=7, max_bytes=4)
    assert (piece.size, piece.data) == (14, b"line")
    assert (await ask(server, offset=14)).data == b""
    size_only = await ask(server, max_bytes=0)
    assert (size_only.exists, size_only.size, size_only.data) == (True, 14, b"")
    missing = await ask(server, attempt_no=2)
    assert (missing.exists, missing.error, missing.retention_hours) == (False, None, 168)


async def test_bytes_that_are_not_text_come_back_as_they_are(tmp_path: Path) -> None:
    path = attempt_log_path(tmp_path, JOB, "worker", 0, 1)
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(range(256)) * 512)  # 128 KiB
    chunk = await ask(LogServer(tmp_path))
    assert chunk.data == (bytes(range(256)) * 512)[:CHUNK_BYTES]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("job_id", ".."),
        ("job_id", "../logs"),
        ("job_id", f"{JOB}/../.."),
        ("job_id", "/etc"),
        ("job_id", "."),
        ("job_id", ""),
        ("job_id", "job\x00"),
        ("task_role", ".."),
        ("task_role", "../../secret"),
        ("task_role", "a/b"),
    ],
)
async def test_a_request_whose_names_are_not_names_is_refused(log_dir: Path, field: str, value: str) -> None:
    answer = await ask(LogServer(log_dir), **{field: value})
    assert answer.error is not None
    assert answer.error.startswith("refused: the ")
    assert "is not a name" in answer.error
    assert (answer.exists, answer.data) == (False, b"")
    with pytest.raises(RefusedLogRequest):
        attempt_log_path(
            log_dir, **{"job_id": JOB, "task_role": "worker", field: value}, task_index=0, attempt_no=1
        )


@pytest.mark.parametrize(
    "fields",
    [
        {"task_index": -1},
        {"attempt_no": 0},
        {"offset": -1},
        {"max_bytes": CHUNK_BYTES + 1},  # more than a NATS message should carry
        {"path": "/etc/passwd"},  # there is no such field: a path is never taken
    ],
)
async def test_a_request_out_of_range_or_naming_a_path_is_refused(
    log_dir: Path, fields: dict[str, object]
) -> None:
    answer = await ask(LogServer(log_dir), **fields)
    assert answer.error is not None
    assert answer.error.startswith("refused: not a log request")
    assert answer.data == b""


async def test_a_link_out_of_the_log_dir_is_refused(log_dir: Path, tmp_path: Path) -> None:
    other = attempt_log_path(log_dir, JOB, "worker", 1, 1)
    other.parent.mkdir()
    other.symlink_to(tmp_path / "secret")
    answer = await ask(LogServer(log_dir), task_index=1)
    assert answer.error == "refused: attempt-1.log leads outside this node's log dir"
    assert answer.data == b""


async def test_something_that_is_not_a_file_is_refused(log_dir: Path) -> None:
    attempt_log_path(log_dir, JOB, "worker", 0, 3).mkdir()
    answer = await ask(LogServer(log_dir), attempt_no=3)
    assert answer.error == "refused: attempt-3.log is not a regular file"


async def test_what_the_api_sends_is_what_the_node_reads() -> None:
    """The shared request model round-trips (the API builds it, the node parses it)."""
    sent = LogRequest(
        attempt_id="att-1", job_id=JOB, task_role="worker", task_index=2, attempt_no=3, offset=5
    )
    assert LogRequest.model_validate_json(sent.model_dump_json()) == sent
