"""The outbox relay when JetStream cannot store: NATS's disk is full.

nats-server answers nothing to a publish its file store could not write (the client
times out), and a stream whose write once failed refuses every later one, space or not,
until the server restarts (its ``/healthz`` reports the stream's write error meanwhile).
So the relay cannot tell a full store from a server away, and need not: it keeps the
rows unsent, says what to look at, and publishes them, once and in order, when NATS
stores again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.local.nats import LocalNats
from corral.local.ports import free_port
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.events import JobSubmitted
from shared.outbox import OutboxRelay, append
from shared.settings import NatsSettings
from tests.shared.outbox_helpers import make_event, stream_messages
from tests.small_disk import fill, small_disk

# Bigger than a page, so that no event fits in what the store's last page has left.
PADDING = "x" * 8192


@pytest.fixture
def disk() -> Iterator[Path]:
    with small_disk(16, "corral-nats-full-") as path:
        yield path


async def _append(db: Database, name: str) -> None:
    async with db.transaction() as conn:
        await append(conn, make_event("job-1", name), aggregate="job-1")


async def _relay_until(relay: OutboxRelay, count: int, timeout_s: float = 30.0) -> None:
    """Relay passes, as the relay's poll makes them, until ``count`` rows went out."""
    published = 0
    async with asyncio.timeout(timeout_s):
        while published < count:
            published += await relay.relay_pending()
            await asyncio.sleep(0.2)


@pytest.mark.slow
async def test_rows_wait_while_the_nats_store_is_full_and_go_out_once_in_order_after(
    db: Database, disk: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = LocalNats(disk / "nats", free_port())
    nats_log = tmp_path / "nats.log"  # (off the full disk, to be read)
    server.start(log_file=nats_log)
    bus = None
    try:
        bus = await NatsBus.connect(NatsSettings(url=server.url))
        await bus.ensure_streams()
        relay = OutboxRelay(db, bus)
        await _append(db, "before")
        assert await relay.relay_pending() == 1

        await asyncio.to_thread(fill, disk / "filler")
        await _append(db, "full-1" + PADDING)
        await _append(db, "full-2" + PADDING)
        with caplog.at_level(logging.WARNING, logger="shared.outbox.sending"):
            assert await relay.relay_pending() == 0
        assert await db.fetchval("SELECT count(*) FROM corral.outbox WHERE sent_at IS NULL") == 2
        [line] = [r.getMessage() for r in caplog.records if r.name == "shared.outbox.sending"]
        assert "NATS did not take corral.job.submitted.job-1" in line
        assert "0 of 2 rows published, the rest stay unsent and are retried" in line
        # What the line tells an operator to look for is there.
        assert "no space left on device" in nats_log.read_text()

        (disk / "filler").unlink()
        server.stop()  # (its stream keeps refusing until it restarts, see the module doc)
        server.start(log_file=nats_log)
        await _relay_until(relay, 2)  # once the client has reconnected

        assert await db.fetchval("SELECT count(*) FROM corral.outbox WHERE sent_at IS NULL") == 0
        stored = await stream_messages(bus)
        names = [JobSubmitted.model_validate_json(data).data.name for _, data, _ in stored]
        assert names == ["before", "full-1" + PADDING, "full-2" + PADDING]
    finally:
        if bus is not None:
            await bus.close()
        server.stop()
