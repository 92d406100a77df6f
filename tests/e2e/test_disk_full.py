"""`make up` on a disk that fills up: submits are refused with a 503 that says so, no job
is half-written, and the stack resumes once space returns.

``CORRAL_HOME`` is a small tmpfs of its own, so the stack's Postgres, NATS and logs all
live on the one filesystem the test fills, as on a machine whose only disk runs out. A
filler file takes every free byte, in two steps of what Postgres does then:

- a table needs a new block: the statement is refused (``DiskFullError``, SQLSTATE
  53100) and Postgres carries on;
- the WAL needs a new segment: the writing backend PANICs, crash recovery cannot write
  its end-of-recovery WAL either, and the postmaster exits; the supervisor restarts it
  until there is room again.

Removing the filler gives the space back. (NATS with a store that cannot write is
tests/shared/test_outbox_store_full.py's.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from corral.local.ports import free_port
from corral.local.postgres import LocalPostgres
from tests.e2e.stack import Stack, submit, wait_state
from tests.small_disk import fill, small_disk

# Room for Postgres (initdb's cluster is ~40 MB, a WAL segment 16 MB), NATS's store,
# the services' logs and a few jobs; the filler takes the rest.
DISK_MB = 160
# Submits while the disk is full until one is refused: those before it may still fit in
# pages and a WAL segment Postgres had already allocated.
REFUSED_WITHIN = 200
SPACE_RETURNS_WITHIN_S = 30.0
SPEC = {"name": "after-space", "tasks": [{"name": "main", "command": "echo resumed"}]}
DISK_FULL = "/docs/problems/disk-full"
UNAVAILABLE = "/docs/problems/unavailable"


@pytest.fixture
def disk() -> Iterator[Path]:
    with small_disk(DISK_MB, "corral-full-") as path:
        yield path


@pytest.fixture
async def stack(disk: Path) -> AsyncIterator[Stack]:
    servers = {"CORRAL_PG_PORT": str(free_port()), "CORRAL_NATS_PORT": str(free_port())}
    stack = Stack(disk, servers)
    stack.start()
    try:
        await stack.wait_ready()
        yield stack
    finally:
        code = stack.stop()
        _kill_servers_left(stack)  # (so that the tmpfs can be unmounted)
        assert code == 0, f"supervisor exited {code}:\n{stack.logs('supervisor')}"


def _kill_servers_left(stack: Stack) -> None:
    """The stack's Postgres and NATS, if a supervisor that did not stop cleanly left them
    running (they run in sessions of their own); by pid, and only if the process there
    still names this stack's home."""
    for name in ("postgres", "nats-server"):
        with contextlib.suppress(OSError, ValueError):
            pid = stack.pid(name)
            if str(stack.home) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                os.kill(pid, signal.SIGKILL)


async def _post(http: httpx.AsyncClient, key: str | None = None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return await http.post("/api/v1/jobs", json=SPEC, headers=headers)


def _owner(stack: Stack) -> LocalPostgres:
    return LocalPostgres(stack.home / "postgres", int(stack.env["CORRAL_PG_PORT"]))


async def _stored_jobs(stack: Stack, timeout_s: float = 30.0) -> set[str]:
    """Every job in Postgres, read as its owner once it takes connections."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = await asyncpg.connect(_owner(stack).url(), timeout=5)
            try:
                return {row["id"] for row in await conn.fetch("SELECT id FROM api.jobs")}
            finally:
                await conn.close()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _run_wal_into_a_new_segment(stack: Stack) -> BaseException:
    """Make Postgres need a WAL segment it has no room for, as a full disk does sooner or
    later: a record, then a switch to the next segment, until one is refused (a segment
    recycled or preallocated earlier may take a round or two). What the session got."""
    conn = await asyncpg.connect(_owner(stack).url(), timeout=5)
    try:
        for _ in range(8):
            await conn.execute("SELECT pg_logical_emit_message(false, 'corral-test', 'x')")
            await conn.execute("SELECT pg_switch_wal()")
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return exc
    finally:
        conn.terminate()
    raise AssertionError("Postgres wrote 8 WAL segments on a full disk")


def _assert_refused(answer: httpx.Response, types: set[str]) -> None:
    """A 503 problem+json of one of ``types``, saying nothing was changed, with Retry-After."""
    assert answer.status_code == 503, answer.text  # never a 500
    assert answer.headers["content-type"] == "application/problem+json", answer.text
    problem = answer.json()
    assert problem["type"] in types, problem
    assert "nothing was changed" in problem["detail"], problem
    assert int(answer.headers["Retry-After"]) > 0


async def test_a_full_disk_refuses_submits_whole_and_the_stack_resumes_when_space_returns(
    stack: Stack, disk: Path
) -> None:
    filler = disk / "filler"
    async with stack.client() as http:
        before = await submit(http, "echo before")
        await wait_state(http, before, {"SUCCEEDED"}, timeout_s=60)
        await asyncio.to_thread(fill, filler)

        # A table needing a new block: Postgres refuses the statement (DiskFullError). The
        # submits before that one fit in blocks it had already.
        accepted: list[str] = []
        for _ in range(REFUSED_WITHIN):
            answer = await _post(http)
            if answer.status_code != 201:
                break
            accepted.append(answer.json()["id"])
            await asyncio.to_thread(fill, filler)  # what Postgres or NATS freed meanwhile
        _assert_refused(answer, {DISK_FULL})
        assert "disk is full" in answer.json()["detail"]
        assert await _stored_jobs(stack) == {before, *accepted}, "the refused submit stored nothing"

        # The WAL needing a new segment: Postgres PANICs, its crash recovery cannot write
        # either, and the postmaster exits (the supervisor restarts it, until there is room).
        # A submit meanwhile is still a 503 at once.
        said = await _run_wal_into_a_new_segment(stack)
        print(f"Postgres, asked for a WAL segment on the full disk: {said!r}")
        key = str(uuid.uuid4())
        for _ in range(10):
            _assert_refused(await _post(http, key), {DISK_FULL, UNAVAILABLE})
            await asyncio.sleep(0.2)

        filler.unlink()
        freed = time.monotonic()
        job_id = await _submit_once_there_is_room(http, key)
        print(f"space back -> a submit succeeds: {time.monotonic() - freed:.1f} s")
        replay = await _post(http, key)
        assert (replay.status_code, replay.json()["id"]) == (201, job_id)
        assert replay.headers["Idempotent-Replayed"] == "true"

        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}, timeout_s=60)
        print(f"space back -> that job SUCCEEDED: {time.monotonic() - freed:.1f} s")
        assert job["state"] == "SUCCEEDED"
        assert (await http.get(f"/api/v1/jobs/{job_id}/logs")).text == "resumed\n"
        for earlier in accepted:  # (accepted on the full disk: their events went out too)
            assert (await wait_state(http, earlier, {"SUCCEEDED", "FAILED"}, 60))["state"] == "SUCCEEDED"
        kept = (await http.get(f"/api/v1/jobs/{before}")).json()
        assert kept["state"] == "SUCCEEDED"
        assert (await http.get(f"/api/v1/jobs/{before}/logs")).text == "before\n"
    assert await _stored_jobs(stack) == {before, *accepted, job_id}


async def _submit_once_there_is_room(http: httpx.AsyncClient, key: str) -> str:
    """Retry the refused submit, with its key, until it is taken; 503s meanwhile (Postgres
    restarting), never another answer. The job it creates is a new one: the refused tries
    left no key behind."""
    deadline = time.monotonic() + SPACE_RETURNS_WITHIN_S
    while time.monotonic() < deadline:
        try:
            answer = await _post(http, key)
        except httpx.TransportError:
            await asyncio.sleep(0.2)
            continue
        if answer.status_code == 201:
            assert "Idempotent-Replayed" not in answer.headers, "a refused submit left its key"
            job_id: str = answer.json()["id"]
            return job_id
        _assert_refused(answer, {DISK_FULL, UNAVAILABLE})
        await asyncio.sleep(0.2)
    raise AssertionError(f"no submit succeeded within {SPACE_RETURNS_WITHIN_S:.0f} s of space returning")
