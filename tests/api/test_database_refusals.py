"""What a submit answers when Postgres refuses the write for want of resources, or ends
the session in a crash: a 503 problem that says which, never a 500, and nothing stored.

Postgres raises those errors here from a trigger on the outbox, the last row a submit
writes (so the job row before it is in the same, rolled-back transaction): the error a
full disk gives, with its SQLSTATE, without filling a disk. tests/e2e/test_disk_full.py
fills a real one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from shared.db.pool import Database

HELLO: dict[str, Any] = {
    "name": "hello",
    "tasks": [{"name": "main", "instances": 1, "command": "echo hello", "resources": {"gpus": 1}}],
}
PROBLEMS = "/docs/problems/"


class Refusal:
    """Postgres refusing every outbox insert with ``sqlstate``, until ``lift``."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def impose(self, sqlstate: str) -> None:
        await self.db.execute(
            f"""CREATE OR REPLACE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'refused for the test' USING ERRCODE = '{sqlstate}'; END $$"""
        )
        await self.db.execute(
            "CREATE OR REPLACE TRIGGER refuse BEFORE INSERT ON corral.outbox "
            "FOR EACH ROW EXECUTE FUNCTION public.refuse()"
        )

    async def lift(self) -> None:
        await self.db.execute("DROP TRIGGER IF EXISTS refuse ON corral.outbox")


@pytest.fixture
async def refusal(db: Database) -> AsyncIterator[Refusal]:
    refusal = Refusal(db)
    yield refusal
    await refusal.lift()


async def _counts(db: Database) -> tuple[int, int, int]:
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM api.jobs) AS jobs, (SELECT count(*) FROM corral.outbox) AS events,"
        " (SELECT count(*) FROM api.idempotency_keys) AS keys"
    )
    assert row is not None
    return row["jobs"], row["events"], row["keys"]


def _problem(answer: httpx.Response, status: int = 503) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    return body


@pytest.mark.parametrize("key", [None, "retry-me"], ids=["one statement", "idempotency key"])
async def test_a_full_disk_is_a_503_disk_full_and_stores_nothing(
    client: httpx.AsyncClient, db: Database, refusal: Refusal, key: str | None
) -> None:
    headers = {"Idempotency-Key": key} if key else {}
    assert (await client.post("/api/v1/jobs", json=HELLO)).status_code == 201
    before = await _counts(db)
    await refusal.impose("53100")  # disk_full

    answer = await client.post("/api/v1/jobs", json=HELLO, headers=headers)
    problem = _problem(answer)
    assert problem["type"] == PROBLEMS + "disk-full"
    assert problem["detail"] == (
        "the database's disk is full: free space where Postgres keeps its data, then retry; "
        "nothing was changed"
    )
    assert answer.headers["Retry-After"] == "10"
    assert await _counts(db) == before


async def test_a_submit_refused_for_a_full_disk_is_made_once_when_retried_with_its_key(
    client: httpx.AsyncClient, db: Database, refusal: Refusal
) -> None:
    headers = {"Idempotency-Key": "retry-me"}
    await refusal.impose("53100")
    refused = await client.post("/api/v1/jobs", json=HELLO, headers=headers)
    assert _problem(refused)["type"] == PROBLEMS + "disk-full"
    assert await _counts(db) == (0, 0, 0), "the key went with the job: the retry is not a replay"

    await refusal.lift()  # space is back
    first = await client.post("/api/v1/jobs", json=HELLO, headers=headers)
    assert first.status_code == 201, first.text
    assert "Idempotent-Replayed" not in first.headers
    again = await client.post("/api/v1/jobs", json=HELLO, headers=headers)
    assert (again.status_code, again.json()["id"]) == (201, first.json()["id"])
    assert again.headers["Idempotent-Replayed"] == "true"
    assert await _counts(db) == (1, 1, 1)


@pytest.mark.parametrize(
    ("sqlstate", "says"),
    [
        ("53200", "the database is out of memory"),
        ("53300", "the database has no connection slot left"),
        ("53400", "the database is out of a resource it needs (SQLSTATE 53400"),
    ],
    ids=["out of memory", "too many connections", "a configured limit"],
)
async def test_postgres_out_of_another_resource_is_a_503_that_names_it(
    client: httpx.AsyncClient, db: Database, refusal: Refusal, sqlstate: str, says: str
) -> None:
    await refusal.impose(sqlstate)
    answer = await client.post("/api/v1/jobs", json=HELLO)
    problem = _problem(answer)
    assert problem["type"] == PROBLEMS + "database-out-of-resources"
    assert problem["detail"].startswith(says)
    assert problem["detail"].endswith("then retry; nothing was changed")
    assert answer.headers["Retry-After"] == "10"
    assert await _counts(db) == (0, 0, 0)


async def test_a_session_ended_by_another_backends_crash_is_a_503_unavailable(
    client: httpx.AsyncClient, db: Database, refusal: Refusal
) -> None:
    """What every other session gets while Postgres restarts after a PANIC (a WAL write
    on a full disk, say): crash_shutdown."""
    await refusal.impose("57P02")
    answer = await client.post("/api/v1/jobs", json=HELLO)
    assert _problem(answer)["type"] == PROBLEMS + "unavailable"
    assert answer.headers["Retry-After"] == "2"
    assert await _counts(db) == (0, 0, 0)
