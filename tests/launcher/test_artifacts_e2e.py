"""The artifact pipe in a whole stack of real processes, each on its own bus identity:
an agent SIGKILLed in the middle of an upload is restarted by its supervisor, finishes
the upload, and the job keeps its whole output."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path

import asyncpg

from tests.e2e.stack import Stack, submit, wait_state

SIZE = 120_000_000


def _part_files(staging: Path) -> list[Path]:
    try:
        return [p for p in staging.rglob("*.part") if p.stat().st_size > 0]
    except FileNotFoundError:  # (one went while we looked)
        return []


async def test_an_agent_killed_mid_upload_finishes_it_when_restarted(stack: Stack) -> None:
    url = stack.env["CORRAL_DATABASE_URL"]
    async with stack.client() as http:
        job_id = await submit(
            http,
            f"head -c {SIZE} /dev/urandom > $CORRAL_OUTPUT_DIR/weights",
            outputs=[{"name": "model", "path": "weights"}],
        )
        staging = stack.home / "artifacts" / "staging"
        deadline = time.monotonic() + 60
        while not (parts := _part_files(staging)):
            assert time.monotonic() < deadline, f"the upload never started:\n{stack.logs('agent')}"
            await asyncio.sleep(0.02)
        assert parts[0].stat().st_size < SIZE
        old = stack.kill("agent")  # mid-upload
        conn = await asyncpg.connect(url)
        try:
            assert (
                await conn.fetchval("SELECT count(*) FROM launcher.task_outputs WHERE job_id = $1", job_id)
                == 0
            )
            await stack.wait_restarted("agent", old)
            job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}, timeout_s=60)
            assert job["state"] == "SUCCEEDED", job
            row = await conn.fetchrow(
                "SELECT files, size_bytes, manifest FROM launcher.artifacts"
                " WHERE job_id = $1 AND output = 'model'",
                job_id,
            )
        finally:
            await conn.close()
    weights = stack.home / "work" / job_id / "outputs" / "main-0" / "weights"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert row is not None
    assert (row["files"], row["size_bytes"]) == (1, SIZE)
    assert json.loads(row["manifest"]) == [{"path": "weights", "size": SIZE, "sha256": digest}]
    stored = stack.home / "artifacts" / "blobs" / "sha256" / digest[:2] / digest
    assert stored.stat().st_size == SIZE
