"""The live policy's starvation limit, load-aware: how long a job may wait before the guard
promotes it (planner.py, "Least attained service"; levels.py).

A fixed limit cannot fit every cluster: on the production traces 12 hours costs an
overloaded 16-node slice a third of its average job completion time (hundreds of jobs
wait that long there), while 2 days lets a lightly loaded 80-node slice's tail grow past
FIFO's. So the limit follows the load: ``factor`` times the typical wait, and never less
than ``min_wait_s``.

The typical wait is a time-weighted moving average, time constant ``window_s``, of the queueing
delay (all its waits, before its first start and after every preemption) of jobs as they
finish. Each completion moves it by weight ``max(1 - exp(-dt / window_s), MIN_WEIGHT)``,
dt being the time since the previous completion: a time average in which a burst of
completions at one instant still counts a little. Why finished jobs' whole waits and not
first-start waits: under least attained service a job starts soon and waits later, after
it is preempted; the first-start wait stays near zero on an overloaded slice, the limit
at its floor, and the guard then promotes so many jobs that cluster02 loses a fifth of
its average JCT (docs/performance.md).

The live cycle folds in the jobs that finished since it last looked, once a minute
(``cycle.py``, ``repository.finished_waits``); the simulator's ``corral`` policy as jobs finish.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIN_WEIGHT = 1e-3


@dataclass(frozen=True)
class StarvationRule:
    min_wait_s: float = 12 * 3600.0
    factor: float = 12.0
    window_s: float = 7 * 86400.0  # the typical wait's time constant

    def limit(self, typical_wait_s: float) -> float:
        return max(self.min_wait_s, self.factor * typical_wait_s)


class TypicalWait:
    """The time-weighted moving average of finished jobs' queueing delay, fed in the order
    they finish (0 until the first)."""

    def __init__(self, time_constant_s: float) -> None:
        self._time_constant_s = time_constant_s
        self._last_finish_s: float | None = None
        self.value = 0.0

    def finished(self, now: float, waited_s: float) -> None:
        if self._last_finish_s is None:
            self.value = waited_s
        else:
            weight = 1.0 - math.exp(-(now - self._last_finish_s) / self._time_constant_s)
            self.value += max(weight, MIN_WEIGHT) * (waited_s - self.value)
        self._last_finish_s = now

    @property
    def last_finish_s(self) -> float | None:
        return self._last_finish_s
