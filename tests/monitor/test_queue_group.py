"""Monitor instances share the heartbeats: a core-NATS queue group, each message to one."""

from __future__ import annotations

import asyncio

from shared.bus.nats import NatsBus
from tests.monitor.test_ingest import heartbeat


async def test_two_listeners_split_the_heartbeats_between_them(bus: NatsBus) -> None:
    heard: dict[str, list[bytes]] = {"a": [], "b": []}
    listeners = [
        asyncio.create_task(bus.listen("corral.metrics.node.>", "monitor", heard[name].append))
        for name in heard
    ]
    for n in range(2000):  # until both are subscribed: each has heard a warm-up heartbeat
        if heard["a"] and heard["b"]:
            break
        await bus.nc.publish(f"corral.metrics.node.warm{n}", heartbeat(f"warm{n}", gpus=1))
        await asyncio.sleep(0.01)
    await bus.nc.flush()
    await asyncio.sleep(0.2)  # the last warm-ups delivered before the count starts
    for received in heard.values():
        received.clear()
    for n in range(400):
        await bus.nc.publish(f"corral.metrics.node.n{n}", heartbeat(f"n{n}", gpus=1))
    await bus.nc.flush()
    for _ in range(100):
        if len(heard["a"]) + len(heard["b"]) == 400:
            break
        await asyncio.sleep(0.05)
    for task in listeners:
        task.cancel()
    await asyncio.gather(*listeners, return_exceptions=True)
    assert len(heard["a"]) + len(heard["b"]) == 400  # each heartbeat to exactly one monitor
    assert heard["a"]
    assert heard["b"]  # and both got a share
