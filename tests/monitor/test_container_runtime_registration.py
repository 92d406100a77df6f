"""A node's container runtime travels from its exporter's setting to ``monitor.nodes``: a
change of runtime is a new registration, carrying it."""

from __future__ import annotations

import json

from services.monitor.health import default_rules
from services.monitor.ingest import HeartbeatIngest
from services.monitor.settings import MonitorSettings
from shared.container_runtime import RuntimeName
from shared.db.pool import Database
from shared.events import NodeTelemetry
from shared.events.nodes import NodeTelemetryData


def _heartbeat(runtime: RuntimeName) -> bytes:
    data = NodeTelemetryData(
        node_id="n1", hostname="n1", simulated=True, interval_s=1.0, gpus=[], container_runtime=runtime
    )
    return NodeTelemetry(source="corral/exporter", subject="n1", data=data).model_dump_json().encode()


async def test_a_node_that_starts_running_images_registers_again(db: Database) -> None:
    monitor = HeartbeatIngest(db, default_rules(), MonitorSettings(touch_interval_s=0.001))
    for runtime in ("", "", "podman", "podman"):
        monitor.receive(_heartbeat(runtime))
        await monitor.flush()
    assert await db.fetchval("SELECT container_runtime FROM monitor.nodes WHERE id = 'n1'") == "podman"
    rows = await db.fetch(
        "SELECT payload FROM corral.outbox WHERE subject = 'corral.node.registered.n1' ORDER BY id"
    )
    payloads = [json.loads(bytes(r["payload"])) for r in rows]
    assert [p["data"]["container_runtime"] for p in payloads] == ["", "podman"]
