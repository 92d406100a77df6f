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
    await asyncio.sleep(0.5)  # both subscribed
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
