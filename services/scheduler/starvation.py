"""The live policy's starvation limit, load-aware: how long a job may wait before the guard
promotes it (planner.py, "Least attained service").

A fixed limit cannot fit every cluster: on the production traces 12 hours cost an
overloaded 16-node slice a third of its average job completion time (hundreds of jobs
wait that long there), while 2 days let a lightly loaded 80-node slice's tail grow past
FIFO's. So the limit follows the load: ``factor`` times the typical wait — the average
wait from submit to first start of the jobs that first started within ``window_s`` — and
never less than ``min_wait_s``. The simulator's Corral model found the same shape
(docs/performance.md); the live cycle asks Postgres for the typical wait now and then
(``cycle.py``), the simulator's ``live`` policy keeps it as jobs start (``TypicalWait``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class StarvationRule:
    min_wait_s: float = 12 * 3600.0
    factor: float = 12.0
    window_s: float = 7 * 86400.0

    def limit(self, typical_wait_s: float) -> float:
        return max(self.min_wait_s, self.factor * typical_wait_s)


class TypicalWait:
    """The average first-start wait over a sliding window, fed as jobs first start."""

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._waits: deque[tuple[float, float]] = deque()  # (started at, waited)
        self._total = 0.0

    def started(self, now: float, waited_s: float) -> None:
        self._waits.append((now, waited_s))
        self._total += waited_s

    def value(self, now: float) -> float:
        while self._waits and self._waits[0][0] <= now - self._window_s:
            self._total -= self._waits.popleft()[1]
        return self._total / len(self._waits) if self._waits else 0.0
