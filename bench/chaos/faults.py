"""The faults of a chaos run: which, in what order, and the hands that carry them out.

Every process is found by the pid file the supervisor keeps for it in
``$CORRAL_HOME/run/``: ``<service>.pid``, ``agent-<node>.pid`` with several simulated
nodes (``agent.pid`` with one), ``nats-server.pid`` and ``postgres.pid`` (the
postmaster). A fault waits a little for its target to be back from an earlier one (a
Postgres kill takes the services down with it, and each comes back after its own
backoff), and is skipped, and said so, when it does not come back in time.

The kinds:

- ``api`` … ``alerter``: SIGKILL the service; the supervisor restarts it. The API is
  killed only while the SSE subscriber is connected (an open stream through a restart).
- ``agent``: SIGKILL one node's agent; its tasks run on and the next agent adopts them.
- ``agent-partition``: submit a job that outlives the partition, and once its task
  runs, SIGSTOP its node's agent past its lease (lease + 2 s), then SIGCONT it: the
  node's view of a partition. Its tasks are declared LOST and run elsewhere, and the
  agent must kill its stale copies when it is back.
- ``nats-server``, ``postgres``: SIGKILL the server; the supervisor restarts it on its
  store (JetStream's; Postgres into crash recovery).
- ``nats-server-after-burst``: submit a burst of jobs at once and SIGKILL NATS the
  moment the last is accepted, while their events are being published.

The schedule cycles through the kinds, each cycle in a fresh seeded order, so the
first cycle has every kind and a longer run has each several times.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos.jobs import Submitter
from bench.chaos.ledger import read_copies
from bench.chaos.observers import EventWatcher

SERVICES = ("api", "scheduler", "launcher", "monitor", "alerter")
KINDS = (
    *SERVICES,
    "agent",
    "agent-partition",
    "nats-server",
    "nats-server-after-burst",
    "postgres",
)
BURST_JOBS = 4
PARTITION_BEYOND_LEASE_S = 2.0
TARGET_BACK_WITHIN_S = 20.0
SSE_CONNECTED_WITHIN_S = 10.0


def schedule(rng: random.Random, kinds: Sequence[str], count: int) -> list[str]:
    """``count`` faults (at least one of each kind): shuffled cycles through ``kinds``,
    never the same kind twice in a row."""
    order: list[str] = []
    while len(order) < max(count, len(kinds)):
        cycle = list(kinds)
        rng.shuffle(cycle)
        if order and len(cycle) > 1 and cycle[0] == order[-1]:
            cycle.append(cycle.pop(0))
        order.extend(cycle)
    return order[: max(count, len(kinds))]


@dataclass(frozen=True)
class Kill:
    kind: str
    at: float  # time.monotonic() when the signal was sent
    pid: int
    detail: str = ""


@dataclass
class Hands:
    """Carries out one fault at a time and records each (``kills``; ``skipped``)."""

    home: Path
    rng: random.Random
    lease_s: float
    events: EventWatcher
    submitter: Submitter
    say: Callable[[str], None]
    kills: list[Kill] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    async def do(self, kind: str) -> None:
        if kind == "agent":
            await self._kill(kind, self.rng.choice(self._agents()))
        elif kind == "agent-partition":
            await self._partition()
        elif kind == "nats-server-after-burst":
            await self._after_burst()
        elif kind == "api":
            if not await self.events.wait_connected(SSE_CONNECTED_WITHIN_S):
                self.say("the SSE subscriber is not connected; the API is killed all the same")
            await self._kill(kind, "api")
        else:
            await self._kill(kind, kind)

    async def _kill(self, kind: str, process: str, detail: str = "") -> None:
        pid = await self._running(process)
        if pid is None:
            self.skipped.append(kind)
            self.say(f"{kind}: {process} was not running within {TARGET_BACK_WITHIN_S:.0f} s; skipped")
            return
        os.kill(pid, signal.SIGKILL)
        self._record(Kill(kind, time.monotonic(), pid, detail or process))

    async def _partition(self) -> None:
        node = await self._node_running_a_long_task()
        process = self._busiest_agent() if node is None else "agent" if node == "-" else f"agent-{node}"
        pid = await self._running(process)
        if pid is None:
            self.skipped.append("agent-partition")
            return
        os.kill(pid, signal.SIGSTOP)
        self._record(Kill("agent-partition", time.monotonic(), pid, process))
        try:
            await asyncio.sleep(self.lease_s + PARTITION_BEYOND_LEASE_S)
        finally:
            os.kill(pid, signal.SIGCONT)

    async def _node_running_a_long_task(self) -> str | None:
        """Submit a job of the partition reserve, long enough to outlive the partition,
        and the node its task started on (None without such a job, or if it did not
        start in time): a frozen node whose tasks end by themselves would test nothing."""
        plans = self.submitter.take("agent-partition")
        if not plans:
            return None
        job_id = (await self.submitter.submit(plans[0])).job_id
        deadline = time.monotonic() + TARGET_BACK_WITHIN_S
        while time.monotonic() < deadline:
            for copy in read_copies(self.home / "work").values():
                if copy.job_id == job_id and not copy.ended:
                    return copy.node
            await asyncio.sleep(0.1)
        return None

    async def _after_burst(self) -> None:
        pid = await self._running("nats-server")
        if pid is None:
            self.skipped.append("nats-server-after-burst")
            return
        submitted = await self.submitter.burst("nats-server-after-burst", BURST_JOBS)
        await self._kill("nats-server-after-burst", "nats-server", f"after {submitted} submits")

    def _record(self, kill: Kill) -> None:
        self.kills.append(kill)
        self.submitter.nudge.set()  # the next submit measures the recovery
        self.say(f"{kill.kind}: {kill.detail} (pid {kill.pid})")

    def _agents(self) -> list[str]:
        return sorted(p.stem for p in (self.home / "run").glob("agent*.pid"))

    def _busiest_agent(self) -> str:
        """The agent whose node runs the most live copies now (ties: the seed's pick):
        freezing an idle node would test nothing."""
        agents = self._agents()
        now = time.time()
        live: dict[str, int] = dict.fromkeys(agents, 0)
        for copy in read_copies(self.home / "work").values():
            if not copy.ended and now - copy.last < 1.0:
                process = "agent" if copy.node == "-" else f"agent-{copy.node}"
                if process in live:
                    live[process] += 1
        most = max(live.values())
        return self.rng.choice([a for a in agents if live[a] == most])

    async def _running(self, process: str) -> int | None:
        """The process's pid once it is running (its pid file names a live process)."""
        deadline = time.monotonic() + TARGET_BACK_WITHIN_S
        while time.monotonic() < deadline:
            pid = _read_pid(self.home / "run" / f"{process}.pid")
            if pid is not None and _alive(pid):
                return pid
            await asyncio.sleep(0.1)
        return None


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
