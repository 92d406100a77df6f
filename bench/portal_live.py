"""The live pages of ``bench.portal``: open pages as browsers hold them, and the events
that wake them.

A ``LiveTab`` is one open page: one SSE connection to its ``/live/…`` view and one
keep-alive connection on which, at every ``changed`` message, it fetches again each panel
the page marks ``hx-trigger="sse:changed"`` (read from the page's own HTML, as htmx does),
with ``HX-Request`` as htmx sends it. They are plain asyncio sockets rather than Chromium
tabs: a hundred browsers would take the cores the API is measured on. The events are
``job.submitted`` published straight to JetStream, as the API's outbox relays them, so
the API spends nothing on making them.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import re
import statistics
import time
from collections.abc import Sequence
from typing import Any

import httpx
import nats

from bench.stack import BenchStack, cpu_s
from shared.events import JobSubmitted
from shared.events.jobs import JobSubmittedData

SESSION_COOKIE = "corral_session"
_TAG = re.compile(r"<[a-zA-Z][^>]*>")
_ATTR = re.compile(r'([a-z-]+)="([^"]*)"')


def live_panels(page_html: str) -> tuple[str, list[str]]:
    """The page's ``sse-connect`` URL and the ``hx-get`` of each panel it re-fetches on
    ``sse:changed``, as htmx reads them."""
    stream, panels = "", []
    for tag in _TAG.findall(page_html):
        attrs = {k: html.unescape(v) for k, v in _ATTR.findall(tag)}
        stream = stream or attrs.get("sse-connect", "")
        if "sse:changed" in attrs.get("hx-trigger", "") and "hx-get" in attrs:
            panels.append(attrs["hx-get"])
    return stream, panels


class LiveTab:
    """One open page: its SSE connection, and the panel fetches each ``changed`` triggers."""

    def __init__(self, port: int, secret: str, stream: str, panels: Sequence[str]) -> None:
        self.port, self.secret, self.stream, self.panels = port, secret, stream, panels
        self.changes = 0
        self.fetch_ms: list[float] = []
        self.errors = 0

    def _request(self, path: str, extra: str = "") -> bytes:
        return (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {SESSION_COOKIE}={self.secret}\r\n{extra}\r\n"
        ).encode()

    async def run(self, connected: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(self._request(self.stream, "Accept: text/event-stream\r\n"))
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            if b" 200 " not in head[:16]:
                raise RuntimeError(f"live stream {self.stream} answered {head[:40]!r}")
            connected.set()
            buffered = b""
            while chunk := await reader.read(65536):
                buffered += chunk
                while b"event: changed" in buffered:
                    buffered = buffered.split(b"event: changed", 1)[1]
                    self.changes += 1
                    await self._refetch()
                buffered = buffered[-32:]
        finally:
            writer.close()
            if self._fetcher is not None:
                self._fetcher[1].close()

    _fetcher: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def _refetch(self) -> None:
        """Each panel again, on a keep-alive connection; a new one when the server has
        closed it (its idle timeout is shorter than a quiet page's wait), as browsers do."""
        started = time.perf_counter()
        for panel in self.panels:
            for attempt in (1, 2):
                if self._fetcher is None:
                    self._fetcher = await asyncio.open_connection("127.0.0.1", self.port)
                reader, writer = self._fetcher
                try:
                    writer.write(self._request(panel, "HX-Request: true\r\n"))
                    await writer.drain()
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    writer.close()
                    self._fetcher = None
                    if attempt == 2:
                        raise
                    continue
                lowered = head.lower()
                at = lowered.find(b"content-length:")
                await reader.readexactly(int(lowered[at + 15 : lowered.find(b"\r\n", at)]))
                if b" 200 " not in head[:16]:
                    self.errors += 1
                break
        self.fetch_ms.append((time.perf_counter() - started) * 1000)


async def publish_events(stack: BenchStack, rate: float, seconds: float) -> int:
    """``job.submitted`` events straight to JetStream, as the API's outbox relays them."""
    connection = await nats.connect(stack.nats_url())
    js = connection.jetstream()
    sent = 0
    try:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            job_id = f"job-live{sent:08d}"
            event = JobSubmitted(
                source="corral/bench",
                subject=job_id,
                data=JobSubmittedData(
                    job_id=job_id, name="live", user="admin", virtual_cluster="default", total_gpus=1
                ),
            )
            await js.publish(event.nats_subject, event.model_dump_json().encode())
            sent += 1
            await asyncio.sleep(max(0.0, started + sent / rate - time.monotonic()))
    finally:
        await connection.close()
    return sent


async def live_load(stack: BenchStack, secret: str, args: argparse.Namespace) -> dict[str, Any]:
    mix = dict(part.split("=") for part in args.live_mix.split(","))
    weights = {path: int(count) for path, count in mix.items()}
    total = sum(weights.values())
    tabs: list[LiveTab] = []
    skipped: list[str] = []
    async with httpx.AsyncClient(
        base_url=stack.base_url, cookies={SESSION_COOKIE: secret}, timeout=60
    ) as http:
        for path, weight in weights.items():
            stream, panels = live_panels((await http.get(path)).text)
            if not stream or not panels:
                skipped.append(path)  # a page that is not live (or not there): said in the output
                continue
            count = round(args.live_pages * weight / total)
            tabs += [LiveTab(stack.port, secret, stream, panels) for _ in range(count)]
    api = int((stack.home / "run" / "api.pid").read_text())
    events = [asyncio.Event() for _ in tabs]
    running = [asyncio.create_task(tab.run(event)) for tab, event in zip(tabs, events, strict=True)]
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 60)
        await asyncio.sleep(2)  # each stream registered with the hub

        def changes() -> int:
            return sum(t.changes for t in tabs)

        def fetches() -> int:
            return sum(len(t.fetch_ms) for t in tabs)

        changes0, cpu0, at0 = changes(), cpu_s(api), time.monotonic()
        await asyncio.sleep(args.live_seconds)
        changes1, fetches1, cpu1, at1 = changes(), fetches(), cpu_s(api), time.monotonic()
        sent = await publish_events(stack, args.event_rate, args.live_seconds)
        cpu2, at2 = cpu_s(api), time.monotonic()
        await asyncio.sleep(1.5)  # the last changes' fetches
        changes2, fetches2 = changes(), fetches()
        failed = [task for task in running if task.done()]
        if failed:
            raise RuntimeError(f"{len(failed)} live pages lost their stream: {failed[0].exception()!r}")
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    fetch_ms = [ms for t in tabs for ms in t.fetch_ms]
    return {
        "live_pages": len(tabs),
        "live_mix": {path: weight for path, weight in weights.items() if path not in skipped},
        "live_pages_not_live": skipped,
        "live_idle_api_cpu_pct": round(100 * (cpu1 - cpu0) / (at1 - at0), 1),
        "live_idle_changes_received": changes1 - changes0,
        "live_busy_api_cpu_pct": round(100 * (cpu2 - cpu1) / (at2 - at1), 1),
        "live_events_published": sent,
        "live_event_rate": args.event_rate,
        "live_changes_received": changes2 - changes1,
        "live_panel_fetches": fetches2 - fetches1,
        "live_refetch_p50_ms": round(statistics.median(fetch_ms), 1) if fetch_ms else None,
        "live_refetch_max_ms": round(max(fetch_ms), 1) if fetch_ms else None,
        "live_fetch_errors": sum(t.errors for t in tabs),
        "live_seconds": args.live_seconds,
    }
