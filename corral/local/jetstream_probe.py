"""Whether the stack's NATS still stores messages: a probe the supervisor runs beside it.

A ``nats-server`` whose disk filled keeps running and answering (stream and account
information, core messages), but JetStream keeps the write error on the stream and
leaves every later publish to it unanswered until the server restarts, even once the
space is back. Nothing exits, so reaping cannot see it, and every event would wait for
good. So, as a kubelet's liveness probe does, a thread publishes a small message to a
stream of its own (``CORRAL_PROBE``, one message kept, on the same store) every few
seconds; after ``FAILURES_TO_RESTART`` failures in a row on a server that answers, it
says so and stops the server, which the supervisor then restarts like any that exits.
While the disk is still full the restarted server fails the probe again, and the
restarts back off like any crash loop's; once there is room, the next one recovers.

The write error is kept per stream, so the probe's own stream may have written before
the disk filled and a lifecycle stream after. So the probe also watches the store's
filesystem: once it was seen (nearly) full and has room again, the server is restarted
too, which clears whatever stream failed meanwhile. A disk full for less than one probe
interval can still go unseen: then the events wait until the next restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import nats.errors
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from shared.bus.nats import NatsBus
from shared.errors import TransientError
from shared.settings import NatsSettings

log = logging.getLogger(__name__)

PROBE_STREAM = "CORRAL_PROBE"
PROBE_SUBJECT = "corral.probe"
PROBE_INTERVAL_S = 3.0
PUBLISH_TIMEOUT_S = 2.0
FAILURES_TO_RESTART = 3
# Larger than a memory page: a full tmpfs or disk may still take a few bytes into the
# last page the store already holds, and the probe must need a page of its own.
PROBE_PAYLOAD = bytes(8192)
# Below this much free space the store is taken to be full.
FULL_BELOW_BYTES = 1 << 20
ROOM_AGAIN = "its disk was full and has room again (a restart clears JetStream's write errors)"


class JetStreamProbe(threading.Thread):
    """Publishes to ``PROBE_STREAM`` every ``interval_s`` while ``alive()``; calls
    ``stuck(reason)`` once ``failures`` publishes in a row have failed. The count starts
    anew after a success, and while the server is not alive (being restarted)."""

    def __init__(
        self,
        settings: Callable[[], NatsSettings],
        store: Path,
        alive: Callable[[], bool],
        stuck: Callable[[str], None],
        *,
        interval_s: float = PROBE_INTERVAL_S,
        failures: int = FAILURES_TO_RESTART,
    ) -> None:
        super().__init__(name="jetstream-probe", daemon=True)
        self._settings = settings
        self._store = store
        self._alive = alive
        self._stuck = stuck
        self._interval_s = interval_s
        self._failures = failures
        self._stop = threading.Event()

    def run(self) -> None:
        failed = 0
        was_full = False
        while not self._stop.wait(self._interval_s):
            full = self._store_full()
            if was_full and not full and self._alive():
                self._stuck(ROOM_AGAIN)
            was_full = full
            if not self._alive():
                failed = 0  # down or restarting: the supervisor's reaping has it
                continue
            reason = asyncio.run(self.probe_once())
            if reason is None:
                failed = 0
                continue
            failed += 1
            log.warning("NATS did not store the probe's message (%s), %d time(s) in a row", reason, failed)
            if failed == self._failures:
                self._stuck(f"JetStream stored nothing {failed} times in a row ({reason})")

    def _store_full(self) -> bool:
        try:
            return shutil.disk_usage(self._store).free < FULL_BELOW_BYTES
        except OSError:
            return False  # not made yet

    async def probe_once(self) -> str | None:
        """None when a message was stored; else why not. A server that cannot be reached
        is no failure of its store (the supervisor sees it exit)."""
        try:
            bus = await NatsBus.connect(self._settings(), name="corral-supervisor-probe")
        except (TransientError, OSError):
            return None
        try:
            await bus.js.add_stream(
                StreamConfig(
                    name=PROBE_STREAM,
                    subjects=[PROBE_SUBJECT],
                    storage=StorageType.FILE,
                    max_msgs=1,
                    discard=DiscardPolicy.OLD,
                )
            )
            await bus.js.publish(PROBE_SUBJECT, PROBE_PAYLOAD, timeout=PUBLISH_TIMEOUT_S)
            return None
        except (nats.errors.Error, TimeoutError) as exc:
            return repr(exc)
        finally:
            with contextlib.suppress(OSError):  # a server gone meanwhile: nothing left to close
                await bus.close()

    def stop(self) -> None:
        self._stop.set()
