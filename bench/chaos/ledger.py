"""What the tasks wrote: every copy of every task that ever ran, and when it was alive.

Each task appends to ``ledger`` in its working directory, ``$CORRAL_HOME/work/<job>/``
on a single node and ``$CORRAL_HOME/work/<node>/<job>/`` with several (the agent's work
directory is per node), so the ledger is read from every file of that name under
``work/``. A *copy* is one attempt of one task (job, role, index): alive from its
``start`` record to its last record, ``end`` or the last heartbeat before it was killed.

Two copies of one task alive at once is an overlap. Corral allows exactly one kind: a
node that lost its lease keeps running its task until its agent returns, learns it was
fenced, and kills it, while the task already runs elsewhere. ``unexplained_overlaps``
names the rest: an older copy whose attempt Corral never declared LOST, or an overlap
longer than the lease and a margin (the stale copy should die soon after its agent is
back).

Copies still alive at the end are found by reading the ledger twice, ``ALIVE_PROBE_S``
apart (several heartbeats): a copy that wrote in between is still running, whatever its
job's state says. Wall-clock times are the tasks' own (``date``), compared only with
each other, on this one machine.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ALIVE_PROBE_S = 1.0

TaskKey = tuple[str, str, int]  # job id, role, index


@dataclass
class Copy:
    job_id: str
    role: str
    index: int
    attempt_id: str
    attempt_no: int
    node: str
    started: float
    last: float
    records: int = 1
    ended: bool = False

    @property
    def task(self) -> TaskKey:
        return (self.job_id, self.role, self.index)


@dataclass(frozen=True)
class Overlap:
    task: TaskKey
    older: str  # attempt ids
    newer: str
    seconds: float


def read_copies(work: Path) -> dict[str, Copy]:
    """Every copy in the ledgers under ``work``, by attempt id."""
    copies: dict[str, Copy] = {}
    for path in sorted(work.rglob("ledger")):
        node = path.parent.parent.name if path.parent.parent != work else "-"
        for line in path.read_text(errors="replace").splitlines():
            fields = line.split()
            if len(fields) != 7:
                continue  # a line cut short by a kill mid-write
            kind, job_id, role, index, attempt_id, attempt_no, at = fields
            try:
                when = float(at)
            except ValueError:
                continue
            copy = copies.get(attempt_id)
            if copy is None:
                copy = copies[attempt_id] = Copy(
                    job_id, role, int(index), attempt_id, int(attempt_no), node, when, when, 0
                )
            copy.records += 1
            copy.started = min(copy.started, when)
            copy.last = max(copy.last, when)
            copy.ended = copy.ended or kind == "end"
    return copies


def still_alive(work: Path, probe_s: float = ALIVE_PROBE_S) -> set[str]:
    """Attempt ids of copies that wrote to the ledger during ``probe_s``."""
    before = {attempt: copy.records for attempt, copy in read_copies(work).items()}
    time.sleep(probe_s)
    after = read_copies(work)
    return {attempt for attempt, copy in after.items() if copy.records > before.get(attempt, 0)}


def overlaps(copies: dict[str, Copy], alive: set[str], now: float) -> list[Overlap]:
    """Every pair of copies of one task alive at the same time; a copy still alive
    counts as alive until ``now``."""
    by_task: dict[TaskKey, list[Copy]] = defaultdict(list)
    for copy in copies.values():
        by_task[copy.task].append(copy)
    found = []
    for task, group in by_task.items():
        group.sort(key=lambda c: c.started)
        for i, older in enumerate(group):
            older_end = now if older.attempt_id in alive else older.last
            for newer in group[i + 1 :]:
                newer_end = now if newer.attempt_id in alive else newer.last
                seconds = min(older_end, newer_end) - newer.started
                if seconds > 0:
                    found.append(Overlap(task, older.attempt_id, newer.attempt_id, seconds))
    return found


def unexplained_overlaps(found: list[Overlap], lost: set[str], allowed_s: float) -> list[Overlap]:
    """Overlaps that a lost lease does not explain: the older attempt was not LOST, or
    the two ran side by side for longer than ``allowed_s``."""
    return [o for o in found if o.older not in lost or o.seconds > allowed_s]
