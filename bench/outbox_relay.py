"""A relay pass over one partition's rows (``python -m bench.outbox_relay``).

The launcher's relay publishes every node agent's events (a node may not publish them
itself): three rows a job (started, running, exited), partition by partition, a relay
pass each time. A pass that waits for each row's JetStream ack before sending the next
publishes no faster than one row per round trip: at a thousand jobs a second, three
thousand rows, a serial stage of its own. A pass now publishes each job's rows in order
and the jobs side by side (``sending.publish_each_in_order``).

This times passes over ``--jobs`` jobs' rows (three each, all in one partition) both
ways, alternating, ``--rounds`` each, on a private stack's Postgres and NATS:
``one_ack_at_a_time`` (every row after the ack of the one before, as a pass did) against
``jobs_side_by_side``, and prints one JSON line with the medians and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from unittest import mock

from bench.stack import private_stack
from shared.bus.nats import NatsBus
from shared.bus.protocol import Bus
from shared.db.pool import Database, connect
from shared.events import JobSubmitted
from shared.events.jobs import JobSubmittedData
from shared.outbox import OutboxRelay, append, partition_of
from shared.outbox import relay as relay_module
from shared.outbox.sending import Outgoing, publish_each_in_order, publish_in_order
from shared.settings import DatabaseSettings, NatsSettings

SOURCE = "corral/relay-bench"  # a source no service relays: only this benchmark takes its rows
ROWS_PER_JOB = 3
LanePublisher = Callable[[Bus, Sequence[Sequence[Outgoing]]], Awaitable[list[int | str]]]


async def one_ack_at_a_time(bus: Bus, lanes: Sequence[Sequence[Outgoing]]) -> list[int | str]:
    """A pass as it was: every row of the partition in id order, each after the last's ack."""
    rows = sorted((row for lane in lanes for row in lane), key=lambda row: int(row.key))
    return await publish_in_order(bus, rows)


def _jobs_in_one_partition(prefix: str, count: int) -> list[str]:
    """``count`` job ids whose rows all fall in one partition, as a busy partition's do."""
    wanted = partition_of(f"{prefix}-0", SOURCE)
    candidates = (f"{prefix}-{n}" for n in itertools.count())
    return list(itertools.islice((job for job in candidates if partition_of(job, SOURCE) == wanted), count))


async def _one_pass(db: Database, bus: NatsBus, jobs: list[str], publish: LanePublisher) -> float:
    async with db.transaction() as conn:
        for n in range(ROWS_PER_JOB):
            for job in jobs:
                data = JobSubmittedData(
                    job_id=job, name=f"row-{n}", user="bench", virtual_cluster="default", total_gpus=1
                )
                await append(conn, JobSubmitted(source=SOURCE, subject=job, data=data), aggregate=job)
    rows = len(jobs) * ROWS_PER_JOB
    relay = OutboxRelay(db, bus, source=SOURCE, batch_size=rows)
    with mock.patch.object(relay_module, "publish_each_in_order", publish):
        started = time.perf_counter()
        sent = await relay._relay_partition(partition_of(jobs[0], SOURCE))
        elapsed = time.perf_counter() - started
    if sent != rows:
        raise RuntimeError(f"the pass published {sent} of {rows} rows")
    return elapsed * 1000


async def measure(database_url: str, nats: NatsSettings, jobs: int, rounds: int) -> dict[str, object]:
    db = await connect(DatabaseSettings(url=database_url))
    bus = await NatsBus.connect(nats, name="relay-bench")
    ways: dict[str, LanePublisher] = {
        "one_ack_at_a_time": one_ack_at_a_time,
        "jobs_side_by_side": publish_each_in_order,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    try:
        await bus.ensure_streams()
        for round_no in range(rounds):
            for name, publish in ways.items():
                ids = _jobs_in_one_partition(f"relay-bench-{round_no}-{name}", jobs)
                times[name].append(await _one_pass(db, bus, ids, publish))
    finally:
        await bus.close()
        await db.close()
    before, after = (statistics.median(times[name]) for name in ways)
    rows = jobs * ROWS_PER_JOB
    return {
        "bench": "outbox_relay",
        "rows_per_pass": rows,
        "rounds": rounds,
        "one_ack_at_a_time_pass_ms": round(before, 2),
        "jobs_side_by_side_pass_ms": round(after, 2),
        "one_ack_at_a_time_rows_per_s": round(rows / before * 1000),
        "jobs_side_by_side_rows_per_s": round(rows / after * 1000),
        "speedup": round(before / after, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.outbox_relay", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=32, help="jobs whose rows (three each) a pass publishes")
    parser.add_argument("--rounds", type=int, default=9, help="passes each way, alternating")
    args = parser.parse_args(argv)
    with private_stack(gpus=1) as stack:
        env = stack.nats_env()
        nats = NatsSettings(
            url=env["CORRAL_NATS_URL"],
            user=env["CORRAL_NATS_USER"],
            password_file=Path(env["CORRAL_NATS_PASSWORD_FILE"]),
        )
        result = asyncio.run(measure(stack.database_url(), nats, args.jobs, args.rounds))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
