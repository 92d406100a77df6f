"""Placements on one node take turns inside this launcher process before they open a
transaction (``attempts.py`` takes the same nodes' Postgres locks inside it, which order
placements across launcher processes). Waiting here holds no pooled connection: with
every placement of a one-node cluster on the same node, the placements handled side by
side would otherwise each hold a connection while they wait for the node's lock, and
starve the relay and the decisions of theirs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager


class NodeTurns:
    """An asyncio lock per node, made on first use and dropped once nobody holds or
    awaits it; several nodes are taken in their ids' order, so two placements sharing
    nodes never wait on each other."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @asynccontextmanager
    async def of(self, nodes: Iterable[str]) -> AsyncIterator[None]:
        ordered = sorted(set(nodes))
        for node in ordered:
            self._users[node] = self._users.get(node, 0) + 1
        held: list[str] = []
        try:
            for node in ordered:
                await self._locks.setdefault(node, asyncio.Lock()).acquire()
                held.append(node)
            yield
        finally:
            for node in held:
                self._locks[node].release()
            for node in ordered:
                self._users[node] -= 1
                if not self._users[node]:
                    del self._users[node], self._locks[node]

    def __len__(self) -> int:
        """How many nodes have a lock now (held or awaited)."""
        return len(self._locks)
