"""The probe that finds a running NATS no longer storing (its disk was full), tried on a
real nats-server on a small filesystem: it fails while the disk is full and still after
the space is back (JetStream keeps the write error), passes after a restart; and the
probe's thread reports a stuck server once, after failures in a row."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.local.jetstream_probe import JetStreamProbe
from corral.local.nats import LocalNats
from corral.local.ports import free_port
from shared.settings import NatsSettings
from tests.small_disk import fill, small_disk


def _note(reasons: list[str], told: threading.Event, reason: str) -> None:
    reasons.append(reason)
    told.set()


@pytest.fixture
def disk() -> Iterator[Path]:
    with small_disk(16, "corral-probe-") as path:
        yield path


@pytest.mark.slow
def test_the_probe_fails_on_a_full_store_until_nats_is_restarted(disk: Path, tmp_path: Path) -> None:
    server = LocalNats(disk / "nats", free_port())
    server.start(log_file=tmp_path / "nats.log")
    settings = NatsSettings(url=server.url)
    stuck: list[str] = []
    told = threading.Event()
    probe = JetStreamProbe(
        lambda: settings,
        server.directory,
        lambda: True,
        lambda reason: _note(stuck, told, reason),
        interval_s=0.2,
        failures=2,
    )
    try:
        assert asyncio.run(probe.probe_once()) is None, "a store with room stores"
        filler = disk / "filler"
        fill(filler)
        assert asyncio.run(probe.probe_once()) is not None, "a full store does not"
        filler.unlink()
        assert asyncio.run(probe.probe_once()) is not None, "nor once the space is back"

        probe.start()
        assert told.wait(10), "the thread says the server is stuck"
        assert len(stuck) == 1
        assert "JetStream stored nothing 2 times in a row" in stuck[0]
        probe.stop()

        server.stop()
        server.start(log_file=tmp_path / "nats.log")
        assert asyncio.run(probe.probe_once()) is None, "a restarted server stores again"
    finally:
        probe.stop()
        server.stop()


def test_a_store_whose_disk_was_full_and_has_room_again_is_restarted(disk: Path, tmp_path: Path) -> None:
    """The write error is kept per stream: whichever stream wrote while the disk was full
    is cleared only by a restart, so room coming back is a reason of its own."""
    server = LocalNats(tmp_path / "nats", free_port())  # (its store elsewhere: it stores on)
    server.start()
    told = threading.Event()
    reasons: list[str] = []
    probe = JetStreamProbe(
        lambda: NatsSettings(url=server.url),
        disk,
        lambda: True,
        lambda reason: _note(reasons, told, reason),
        interval_s=0.1,
        failures=1000,
    )
    probe.start()
    try:
        filler = disk / "filler"
        fill(filler)
        assert not told.wait(0.5), "nothing is said while the disk is full"
        filler.unlink()
        assert told.wait(5)
    finally:
        probe.stop()
        server.stop()
    assert reasons == ["its disk was full and has room again (a restart clears JetStream's write errors)"]
