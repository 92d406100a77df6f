"""Several launcher processes sharing the work (``CORRAL_LAUNCHER_PROCESSES``).

A launcher's work is placements (``job.scheduled``), stop requests, and deciding a job
once one of its attempts ends. Any number of launchers may do any of it: every handler
locks the job's row first and checks what it finds (state, generation), the node locks
keep two placements on one node from reading the same free ports, and each event is
recorded as processed in its handler's transaction. So they need no coordinator, only a
fair split:

- **Events**: every launcher pulls from the one durable ``launcher`` consumer, and
  JetStream hands each message to one of them (and, unacknowledged, to another once
  its wait runs out: a launcher killed mid-batch loses nothing).
- **Decisions**: every launcher hears every attempt's end (one NOTIFY channel), and
  decides only the jobs of its shard: those whose outbox partition (below) is its own,
  so the launcher that decides a job is the one that relays its node's events, which
  its decision follows on the stream. The repair loop, which every launcher runs over
  every job, decides the jobs of a shard whose launcher is down.
- **The outbox**: a node agent's events are relayed by a launcher (the agents have no
  NATS rights of their own to publish them): each launcher answers the NOTIFYs of its
  share of the outbox partitions, ``partition mod processes == index`` (a job's events
  are in the partition of its id; the launcher's block has 16 partitions, so a power of
  two splits them evenly and 3 splits them 6/5/5), and every launcher's poll takes rows nobody relayed
  within a poll interval, so a launcher that is down delays its share by up to two.
- **The Kubernetes runner** (the nodes' part, played through Pods) holds the cluster's
  node leases and must be one: only launcher 0 runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.outbox import partition_of


@dataclass(frozen=True)
class Shard:
    """Launcher ``index`` of ``count``."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"launcher index {self.index} is not one of 0 to {self.count - 1}")

    def owns(self, job_id: str) -> bool:
        """Whether this launcher decides ``job_id`` (every job, when it is alone)."""
        return self.count == 1 or self.owns_partition(partition_of(job_id, "corral/launcher"))

    def owns_partition(self, part: int) -> bool:
        """Whether this launcher's relay answers the NOTIFYs of outbox partition ``part``."""
        return part % self.count == self.index

    @property
    def first(self) -> bool:
        """The launcher that runs what must run once (the Kubernetes runner)."""
        return self.index == 0


WHOLE = Shard()
"""A launcher alone: it decides every job."""
