"""Placements take turns per node inside the launcher (``node_turns.py``) before they open
a transaction: one node's one at a time, different nodes' side by side."""

from __future__ import annotations

import asyncio

from services.launcher.node_turns import NodeTurns


async def test_one_nodes_placements_take_turns_and_other_nodes_go_side_by_side() -> None:
    turns = NodeTurns()
    inside: dict[str, int] = {}
    most: dict[str, int] = {}
    overlapped_nodes: list[set[str]] = []
    holding: set[str] = set()

    async def place(name: str, nodes: list[str]) -> None:
        async with turns.of(nodes):
            holding.add(name)
            overlapped_nodes.append(set(holding))
            for node in nodes:
                inside[node] = inside.get(node, 0) + 1
                most[node] = max(most.get(node, 0), inside[node])
            await asyncio.sleep(0.05)
            for node in nodes:
                inside[node] -= 1
            holding.discard(name)

    placements = {"a1": ["a"], "a2": ["a"], "b1": ["b"], "ab": ["b", "a"], "c1": ["c"]}
    await asyncio.gather(*(place(name, nodes) for name, nodes in placements.items()))
    assert most == {"a": 1, "b": 1, "c": 1}  # never two placements on one node at once
    assert max(len(held) for held in overlapped_nodes) >= 2  # different nodes did overlap
    assert len(turns) == 0  # no lock kept once nobody needs it
