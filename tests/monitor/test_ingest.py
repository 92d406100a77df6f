"""The monitor's batched ingest against real Postgres: registration, liveness, health."""

from __future__ import annotations

import asyncpg
import pytest

from services.monitor.health import default_rules
from services.monitor.ingest import REGISTER_PER_FLUSH, HeartbeatIngest
from services.monitor.liveness import mark_silent_nodes_unreachable
from services.monitor.settings import MonitorSettings
from shared.db.pool import Database
from shared.events import NodeTelemetry
from shared.events.nodes import GpuSample, NodeTelemetryData


def heartbeat(node: str, gpus: int = 4, boot: str = "b1", **gpu0: object) -> bytes:
    samples = [
        GpuSample.model_validate(
            {
                "index": i,
                "uuid": f"GPU-{node}-{i}",
                "model": "Sim",
                "memory_total_mb": 80,
                "ecc_uncorrected_volatile": 0,
            }
            | (gpu0 if i == 0 else {})
        )
        for i in range(gpus)
    ]
    data = NodeTelemetryData(
        node_id=node, hostname=node, simulated=True, interval_s=1.0, boot_id=boot, gpus=samples
    )
    return NodeTelemetry(source="corral/exporter", subject=node, data=data).model_dump_json().encode()


def ingest(db: Database) -> HeartbeatIngest:
    return HeartbeatIngest(db, default_rules(), MonitorSettings(touch_interval_s=0.001))


async def outbox(db: Database, prefix: str) -> list[str]:
    rows = await db.fetch("SELECT subject FROM corral.outbox WHERE subject LIKE $1 ORDER BY id", f"{prefix}%")
    return [r["subject"] for r in rows]


async def test_nodes_register_once_and_again_only_when_their_gpus_change(db: Database) -> None:
    monitor = ingest(db)
    monitor.receive(heartbeat("n1"))
    monitor.receive(b'{"not": "a heartbeat"}')
    await monitor.flush()
    await monitor.write_readings()
    assert monitor.counters.heartbeats == 1
    assert monitor.counters.samples == 4
    assert monitor.counters.rejected == 1
    assert await db.fetchval("SELECT count(*) FROM monitor.gpus WHERE node_id = 'n1'") == 4
    assert await db.fetchval("SELECT count(*) FROM monitor.gpu_readings WHERE node_id = 'n1'") == 4
    for _ in range(3):
        monitor.receive(heartbeat("n1"))
        await monitor.flush()
    assert await outbox(db, "corral.node.registered") == ["corral.node.registered.n1"]
    monitor.receive(heartbeat("n1", gpus=5))  # a GPU added
    await monitor.flush()
    assert len(await outbox(db, "corral.node.registered")) == 2
    assert await db.fetchval("SELECT expected_gpus FROM monitor.nodes WHERE id = 'n1'") == 5


async def test_a_silent_node_is_announced_again_when_heard(db: Database) -> None:
    monitor = ingest(db)
    monitor.receive(heartbeat("n1"))
    await monitor.flush()
    await db.execute("UPDATE monitor.nodes SET last_heartbeat = now() - interval '1 hour'")
    async with db.transaction() as conn:
        assert await mark_silent_nodes_unreachable(conn, 15.0) == ["n1"]
    monitor.receive(heartbeat("n1"))
    await monitor.flush()
    assert await db.fetchval("SELECT state FROM monitor.nodes WHERE id = 'n1'") == "READY"
    assert await outbox(db, "corral.node.") == [
        "corral.node.registered.n1",
        "corral.node.unreachable.n1",
        "corral.node.registered.n1",
    ]


async def test_a_whole_cluster_appearing_at_once_registers_in_slices(db: Database) -> None:
    monitor = ingest(db)
    nodes = REGISTER_PER_FLUSH * 2 + 7
    for n in range(nodes):
        monitor.receive(heartbeat(f"n{n:05d}", gpus=1))
    await monitor.flush()
    assert await db.fetchval("SELECT count(*) FROM monitor.nodes") == REGISTER_PER_FLUSH
    await monitor.flush()
    await monitor.flush()
    assert await db.fetchval("SELECT count(*) FROM monitor.nodes") == nodes
    assert len(await outbox(db, "corral.node.registered")) == nodes


async def test_a_hardware_xid_drains_once_and_an_application_xid_never(db: Database) -> None:
    monitor = ingest(db)
    monitor.receive(heartbeat("n1"))
    monitor.receive(heartbeat("n2"))
    await monitor.flush()
    monitor.receive(heartbeat("n1", last_xid=13, xid_count=1))
    monitor.receive(heartbeat("n2", last_xid=48, xid_count=1))
    await monitor.flush()
    for _ in range(3):  # the same Xid in every later heartbeat: no new finding
        monitor.receive(heartbeat("n2", last_xid=48, xid_count=1))
        await monitor.flush()
    rows = await db.fetch(
        "SELECT id, drained_at IS NOT NULL AS drained, drain_reason, drain_evicts"
        " FROM monitor.nodes ORDER BY id"
    )
    assert [(r["id"], r["drained"]) for r in rows] == [("n1", False), ("n2", True)]
    assert "Xid 48" in rows[1]["drain_reason"]
    assert rows[1]["drain_evicts"] is False
    findings = await db.fetch(
        "SELECT node_id, condition, action FROM monitor.health_events WHERE kind = 'finding' ORDER BY id"
    )
    assert [tuple(r) for r in findings] == [("n1", "xid 13", "ignore"), ("n2", "xid 48", "drain")]
    assert await outbox(db, "corral.node.drained") == ["corral.node.drained.n2"]
    # A lost GPU on the drained node widens the drain to an eviction.
    monitor.receive(heartbeat("n2", last_xid=48, xid_count=1, lost=True))
    await monitor.flush()
    assert await db.fetchval("SELECT drain_evicts FROM monitor.nodes WHERE id = 'n2'") is True


async def test_an_exporter_restart_does_not_replay_old_xids_but_sees_new_ones(db: Database) -> None:
    monitor = ingest(db)
    monitor.receive(heartbeat("n1", last_xid=79, xid_count=1))
    await monitor.flush()
    monitor.receive(heartbeat("n1", last_xid=79, xid_count=1))  # already drained; nothing new
    await monitor.flush()
    await db.execute(
        "UPDATE monitor.nodes SET drained_at = NULL, drain_evicts = false"
    )  # as an undrain would
    monitor.receive(heartbeat("n1", boot="b2"))  # restarted exporter: counts from zero
    await monitor.flush()
    assert await db.fetchval("SELECT drained_at FROM monitor.nodes") is None
    monitor.receive(heartbeat("n1", boot="b2", last_xid=74, xid_count=1))
    await monitor.flush()
    assert "Xid 74" in await db.fetchval("SELECT drain_reason FROM monitor.nodes")


async def test_readings_and_liveness_wait_while_postgres_refuses_them(db: Database) -> None:
    monitor = ingest(db)
    monitor.receive(heartbeat("n1"))
    await monitor.flush()
    await db.execute("ALTER TABLE monitor.gpu_readings RENAME TO gpu_readings_away")
    await db.execute("ALTER TABLE monitor.nodes RENAME TO nodes_away")
    monitor.receive(heartbeat("n1", last_xid=48, xid_count=1))
    with pytest.raises(asyncpg.UndefinedTableError):
        await monitor.write_readings()
    with pytest.raises(asyncpg.UndefinedTableError):
        await monitor.flush()
    await db.execute("ALTER TABLE monitor.gpu_readings_away RENAME TO gpu_readings")
    await db.execute("ALTER TABLE monitor.nodes_away RENAME TO nodes")
    await monitor.flush()  # nothing was lost meanwhile: the health check and the readings
    await monitor.write_readings()
    assert "Xid 48" in await db.fetchval("SELECT drain_reason FROM monitor.nodes")
    assert await db.fetchval("SELECT last_xid FROM monitor.gpu_readings WHERE index = 0") == 48


async def test_heartbeats_that_postgres_could_not_store_are_refused_at_the_door(db: Database) -> None:
    monitor = ingest(db)
    good = heartbeat("n1")
    monitor.receive(good.replace(b'"index":1,', b'"index":0,'))  # two samples of GPU 0
    monitor.receive(good.replace(b'"hostname":"n1"', b'"hostname":"n1\\u0000"'))  # a NUL
    monitor.receive(good.replace(b'"memory_total_mb":80', b'"memory_total_mb":99999999999', 1))  # not an int4
    monitor.receive(good.replace(b'"node_id":"n1"', b'"node_id":"../n1"'))
    assert monitor.counters.rejected == 4
    monitor.receive(good)
    await monitor.flush()  # the good one is written; nothing poisons the batch
    assert await db.fetchval("SELECT count(*) FROM monitor.nodes") == 1
