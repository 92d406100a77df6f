"""How much each service is called through this API process's gateway.

Two views of the same count: ``corral_serve_requests_total{service,code}`` for
Prometheus (summed over every API process by whoever scrapes them), and
``requests_per_s(name)`` for a service's status, this process's rate over the last
``WINDOW_S`` seconds. The rate is kept in a ring of one-second buckets per service, so
recording a request is a few integer operations and no allocation; it is this process's
share only (each API process counts what it forwarded), which is what one process can
know without asking the others.

The meter is process-wide, like the Prometheus registry beside it: the gateway records
and the status route reads, and both live as long as the process.
"""

from __future__ import annotations

import time

from prometheus_client import Counter

WINDOW_S = 60

SERVE_REQUESTS = Counter(
    "corral_serve_requests",
    "Requests to services through /serve/{name}/, by service and the status answered.",
    ["service", "code"],
)


class _Ring:
    """Requests per second over the last ``WINDOW_S`` whole seconds."""

    __slots__ = ("counts", "first_second", "seconds")

    def __init__(self, now_s: int) -> None:
        self.counts = [0] * WINDOW_S
        self.seconds = [0] * WINDOW_S
        self.first_second = now_s

    def add(self, now_s: int) -> None:
        slot = now_s % WINDOW_S
        if self.seconds[slot] != now_s:
            self.seconds[slot] = now_s
            self.counts[slot] = 0
        self.counts[slot] += 1

    def rate(self, now_s: int) -> float:
        since = now_s - WINDOW_S
        total = sum(c for c, s in zip(self.counts, self.seconds, strict=True) if s > since)
        # A service first called moments ago is not averaged over a minute it was not called in.
        span = min(WINDOW_S, max(1, now_s - self.first_second + 1))
        return total / span


class TrafficMeter:
    """Per-service request rates of one process."""

    def __init__(self) -> None:
        self._rings: dict[str, _Ring] = {}

    def record(self, service: str, code: int) -> None:
        now_s = int(time.monotonic())
        ring = self._rings.get(service)
        if ring is None:
            ring = self._rings[service] = _Ring(now_s)
        ring.add(now_s)
        SERVE_REQUESTS.labels(service, str(code)).inc()

    def forget(self, service: str) -> None:
        """Drop a service's count: a service created again under an old name starts afresh."""
        self._rings.pop(service, None)

    def requests_per_s(self, service: str) -> float | None:
        """None when this process has forwarded nothing to the service since it started."""
        ring = self._rings.get(service)
        return None if ring is None else ring.rate(int(time.monotonic()))


METER = TrafficMeter()


def requests_per_s(name: str) -> float | None:
    """This process's requests per second to service ``name`` over the last minute; None
    if it has forwarded none to it since it started."""
    return METER.requests_per_s(name)
