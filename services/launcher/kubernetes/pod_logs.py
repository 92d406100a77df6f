"""``PodLogs``: every running pod's log, appended to its attempt's log file as it comes.

A node agent's task writes its output into ``<log dir>/<job>/<role>-<index>/attempt-<n>.log``,
the path ``launcher.attempts.log_path`` names and the API serves and follows
(``services/api/jobs/logs.py``). A pod's output is in the kubelet's keeping instead, and goes
when the pod is deleted; so the runner follows each pod's log and appends it to the
same file, in the same layout, on a volume the API shares (deploy/k8s/base/logs.yaml).
The log then outlives the pod, and the API does not know which driver ran the task.

Each stream starts from the file's cursor (``log_files.py``): a stream that breaks, a
write that fails, a launcher that restarts — each is a new stream from where the file
ends, with no line twice and none left out. A follower ends when its pod has ended and
its stream was read to the end (the kubelet closes it then), or when the pod is gone.

Concurrency: one follower task per live pod, in the task group the runner gives (its
pod-watch root task): a follower that fails unexpectedly takes the launcher down, to be
restarted and resume. At most ``log_streams`` streams are open at once (a semaphore; a
pod beyond that waits for a stream and then catches up from its cursor), over the
driver's separate connection pool. A follower holds at most one flush interval of
output (``log_flush_interval_s``, or 64 KiB) and a read chunk; a thousand pods cost a
thousand small tasks and, at worst, a thousand streams' buffers.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import aiohttp

from services.launcher.kubernetes.api import KubeApiError, NotFound
from services.launcher.kubernetes.driver import KubernetesDriver
from services.launcher.kubernetes.log_files import Cursor, Splicer, load_cursor, remove_cursor, save

log = logging.getLogger(__name__)

FLUSH_BYTES = 64 * 1024
_BROKEN = (KubeApiError, aiohttp.ClientError, TimeoutError, OSError)

Outcome = Literal["eof", "not_started", "broken"]


@dataclass
class _Follower:
    done: asyncio.Event = field(default_factory=asyncio.Event)
    settled: bool = False  # the attempt's end is recorded: its cursor goes when this ends


class PodLogs:
    def __init__(self, driver: KubernetesDriver) -> None:
        self._driver = driver
        self._settings = driver.settings
        self._streams = asyncio.Semaphore(self._settings.log_streams)
        self._followers: dict[str, _Follower] = {}

    def follow(self, tg: asyncio.TaskGroup, attempt_id: str, path: Path) -> None:
        """Follow the attempt's pod into ``path``, unless that is under way already."""
        if attempt_id not in self._followers:
            follower = self._followers[attempt_id] = _Follower()
            tg.create_task(self._run(attempt_id, path, follower), name=f"pod log {attempt_id}")

    def following(self, attempt_id: str) -> bool:
        return attempt_id in self._followers

    async def drained(self, attempt_id: str, timeout_s: float) -> bool:
        """Wait until the attempt's log has been read to its end (at most ``timeout_s``)."""
        follower = self._followers.get(attempt_id)
        if follower is None:
            return True
        try:
            async with asyncio.timeout(timeout_s):
                await follower.done.wait()
        except TimeoutError:
            log.warning("log of %s not read to its end in %ss; recording its end", attempt_id, timeout_s)
            return False
        return True

    async def settle(self, attempt_id: str, path: Path) -> None:
        """The attempt's end is recorded: no follower will start for it again, so its
        cursor is of no more use (removed now, or when its follower ends)."""
        follower = self._followers.get(attempt_id)
        if follower is not None:
            follower.settled = True
        else:
            await asyncio.to_thread(remove_cursor, path)

    # --- one follower ----------------------------------------------------------------

    async def _run(self, attempt_id: str, path: Path, follower: _Follower) -> None:
        try:
            await self._follow(attempt_id, path)
        finally:
            del self._followers[attempt_id]
            follower.done.set()
        if follower.settled:
            await asyncio.to_thread(remove_cursor, path)

    async def _follow(self, attempt_id: str, path: Path) -> None:
        delay = self._settings.retry_delay_s
        while True:
            cursor = await asyncio.to_thread(load_cursor, path)
            if cursor.done:
                return
            outcome: Outcome = "broken"
            try:
                async with self._streams:
                    cursor = await self._stream(attempt_id, path, cursor)
                outcome = "eof"
            except NotFound:
                return  # the pod is gone, and its log with it
            except KubeApiError as error:
                if error.status == 400:  # the container has not started (or never will)
                    outcome = "not_started"
                else:
                    log.warning("the log of %s failed (%s); resuming in %ss", attempt_id, error, delay)
            except _BROKEN as error:
                log.warning("the log of %s broke off (%r); resuming in %ss", attempt_id, error, delay)
            try:
                phase = await self._driver.pod_phase(attempt_id)
            except _BROKEN as error:
                log.warning("could not read the pod of %s (%r)", attempt_id, error)
                phase = "live"
            if phase == "gone" or (phase == "ended" and outcome == "not_started"):
                return
            if phase == "ended" and outcome == "eof":  # the kubelet sent all there is
                await asyncio.to_thread(save, path, b"", cursor, replace(cursor, done=True))
                return
            wait = self._settings.log_wait_interval_s if outcome == "not_started" else delay
            await asyncio.sleep(wait)

    async def _stream(self, attempt_id: str, path: Path, cursor: Cursor) -> Cursor:
        """One stream, from ``cursor`` to its end; the cursor saved last."""
        loop = asyncio.get_running_loop()
        interval = self._settings.log_flush_interval_s
        splicer = Splicer(cursor)
        pending = bytearray()
        flushed_at = loop.time()
        chunks = self._driver.follow_log(attempt_id, cursor.since(), interval)
        async with aclosing(chunks):
            async for chunk in chunks:
                pending += splicer.feed(chunk)
                now = loop.time()
                if pending and (len(pending) >= FLUSH_BYTES or now - flushed_at >= interval):
                    cursor = await self._save(path, pending, cursor, splicer.cursor)
                    flushed_at = now
        if pending:
            cursor = await self._save(path, pending, cursor, splicer.cursor)
        if splicer.unstamped:
            log.warning("%d line(s) of %s's log came without a timestamp", splicer.unstamped, attempt_id)
        return cursor

    @staticmethod
    async def _save(path: Path, pending: bytearray, before: Cursor, position: Cursor) -> Cursor:
        after = replace(position, size=before.size + len(pending))
        await asyncio.to_thread(save, path, bytes(pending), before, after)
        pending.clear()
        return after
