"""The transactional outbox and its relay.

``append`` writes an event into ``corral.outbox`` on the caller's connection, inside
the caller's transaction, so the state change and its event commit or vanish together.

In a service, the process that commits the row publishes it too, at once: ``append``
hands the event to the process's relay through ``after_commit`` (shared/db/pool.py), and
the relay publishes it as soon as the transaction has committed, then stamps it sent
(``OutboxRelay.publish_committed``). That is most of a job's events, each a hop of its
life (submitted → scheduled → assigned → started → ...), and it saves each the wait for
a NOTIFY and three round trips of a relay pass. Should that publish fail (NATS away) or
the process die first, the row is still in the outbox, unsent, and the relays' poll
publishes it.

Without a relay in the context (tests, tools) or a ``commit_scope`` around the
transaction, ``append`` ``NOTIFY``s the relays instead, which Postgres delivers only on
commit; the payload names the row's partition, so the relay that hears it goes straight
there. Every poll interval a relay counts every partition's unsent rows and relays the
partitions that hold one a poll interval old (its NOTIFY was missed, its relay is gone,
or its publish on commit failed): not the rows in flight.

The relay publishes committed rows to JetStream with ``Nats-Msg-Id = event id`` and
stamps ``sent_at`` only after the publish ack. A service's relay publishes only the rows
of the sources its bus identity may publish (``rows.PUBLISHERS``: the launcher's also
the node agents'), each publisher in a block of partitions of its own. Ordering: rows
carry a partition number derived from their publisher and aggregate (usually the job
id). A relay takes a partition with a
session advisory lock, then reads that partition's unsent rows in id order, publishes
each job's rows in that order, each once the one before it was stored, stopping at a
job's first failure (its jobs side by side: not one ack round trip per row of the
pass), stamps those acknowledged, and lets the lock go only once
their stamp has committed. So any number of relays (one per service process) share the
work, while the events of one job reach the stream in the order they were committed. A
crash between publish and stamp re-publishes the row; JetStream's duplicate window
drops it, and consumers are idempotent beyond that window.

Ordering with publishing on commit: a process publishes what it commits in commit order
(sent in that order on its one NATS connection, acks awaited together). Events of one
job that different processes commit are ordered by the job's life itself (the launcher
writes ``job.succeeded`` only after a node agent has recorded ``task.exited``), and so
are the events of one job in one partition that go through relay passes: the launcher's
decision on an attempt's end goes through one (``following_others``), after the agent's
row. Except where a writer acts on what it read from Postgres: the scheduler may place a job whose
``job.submitted`` is still on its way, so it passes ``follows_others`` for a job that
became pending moments ago, and that event goes through a relay pass, which publishes
the job's unsent ``job.submitted`` (or requeue) first (``rows.MAY_PRECEDE``). While a
process's publishes fail, its relay stops publishing on commit for a while and NOTIFYs
instead, so rows left unsent go out in partition order with the
ones after them (a failure amid a burst may still let a later event of the same job go
first). Consumers must (and do) bear reordering anyway (DESIGN.md, rule 2).

The package: ``rows`` (a row's partition, channel and values), ``writing`` (``append``,
``append_many``, ``append_with_change``, ``change_with_event``, publishing on commit),
``relay`` (``OutboxRelay``) and ``sending`` (the publishes themselves).
"""

from shared.outbox.relay import STAMP_AFTER_S, OutboxRelay
from shared.outbox.rows import PARTITIONS, OutboxRow, notify_channel, outbox_row, partition_of
from shared.outbox.writing import (
    PUBLISHED_WITHIN_S,
    Consequence,
    append,
    append_many,
    append_with_change,
    change_with_event,
    committed_by_statement,
    following_others,
    publishing_on_commit,
    relay_on_commit,
    statement_notify_channel,
)

__all__ = [
    "PARTITIONS",
    "PUBLISHED_WITHIN_S",
    "STAMP_AFTER_S",
    "Consequence",
    "OutboxRelay",
    "OutboxRow",
    "append",
    "append_many",
    "append_with_change",
    "change_with_event",
    "committed_by_statement",
    "following_others",
    "notify_channel",
    "outbox_row",
    "partition_of",
    "publishing_on_commit",
    "relay_on_commit",
    "statement_notify_channel",
]
