"""Drains and undrains: the health rules' verdict on a heartbeat, and an admin's request.

A drained node takes no new work; a drain that *evicts* also has the scheduler preempt
the jobs on it (``corral.node.drained`` with ``evict``). Every drain, undrain and finding
is recorded in ``monitor.health_events``. The rules themselves are pure code
(``health.py``); this module applies them under the node's row lock.
"""

from __future__ import annotations

from services.monitor import repository
from services.monitor.health import LASTING, Finding, HealthMarks, HealthRules, evaluate, lasting_conditions
from services.monitor.registration import SOURCE
from shared.db.pool import Connection
from shared.events import NodeDrained, NodeUndrained
from shared.events.nodes import NodeDrainedData, NodeDrainRequestedData, NodeTelemetryData, NodeUndrainedData
from shared.outbox import append


async def drain(conn: Connection, node_id: str, reason: str, by: str, evict: bool) -> bool:
    """Drain the node (or widen a drain to evicting); announce it. False if nothing changed."""
    if not await repository.drain_node(conn, node_id, reason, by, evict):
        return False
    await repository.insert_health_event(
        conn, node_id, "drained", None, "drain", "evict" if evict else "drain", reason, by
    )
    event = NodeDrained(
        source=SOURCE,
        subject=node_id,
        data=NodeDrainedData(node_id=node_id, reason=reason, drained_by=by, evict=evict),
    )
    await append(conn, event, aggregate=node_id)
    return True


async def check_health(conn: Connection, data: NodeTelemetryData, rules: HealthRules) -> list[Finding]:
    """Evaluate the rules on one heartbeat, under the node's row lock; drain if they say so."""
    node = await repository.node_health(conn, data.node_id)
    if node is None:
        return []
    marks = HealthMarks.from_json(node.health_marks)
    findings, new_marks = evaluate(
        data.gpus,
        data.boot_id,
        marks,
        frozenset(node.health_waivers),
        node.expected_gpus,
        rules,
        data.gpu_fault,
    )
    if new_marks != marks:
        await repository.save_health_marks(conn, data.node_id, new_marks.to_json())
    acting = [f for f in findings if f.action != "ignore"]
    new_events = [f for f in findings if f.condition not in LASTING]
    for f in new_events if node.drained else findings:
        # Lasting conditions are written once, when they drain; events every time they occur.
        await repository.insert_health_event(
            conn, data.node_id, "finding", f.gpu_index, f.condition, f.action, f.detail, "monitor"
        )
    if acting:
        evict = any(f.action == "evict" for f in acting)
        await drain(conn, data.node_id, "; ".join(f.detail for f in acting), "monitor", evict)
    return findings


async def apply_drain_request(conn: Connection, request: NodeDrainRequestedData) -> bool:
    """An admin's drain or undrain. Undraining accepts the lasting conditions present now."""
    if not await repository.node_exists(conn, request.node_id):
        return False
    if request.drain:
        return await drain(
            conn, request.node_id, request.reason or "drained by an admin", request.requested_by, False
        )
    gpus = await repository.current_gpus(conn, request.node_id)
    waived = lasting_conditions(gpus)
    if not await repository.undrain_node(conn, request.node_id, waived, len(gpus)):
        return False
    detail = request.reason or "undrained by an admin"
    if waived:
        detail += f" (accepted: {', '.join(waived)})"
    await repository.insert_health_event(
        conn, request.node_id, "undrained", None, "undrain", "none", detail, request.requested_by
    )
    event = NodeUndrained(
        source=SOURCE,
        subject=request.node_id,
        data=NodeUndrainedData(node_id=request.node_id, undrained_by=request.requested_by, waived=waived),
    )
    await append(conn, event, aggregate=request.node_id)
    return True
