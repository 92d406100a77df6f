"""NVLink domains: which GPUs of a node talk to each other over NVLink.

A domain is a connected group: GPUs joined by NVLink directly or through others (an
NVSwitch joins all eight of an HGX board: one domain; a pair of PCIe cards bridged two by
two: four domains). Numbered from 0 by their lowest GPU index, so the numbers are stable
across restarts. The scheduler keeps a multi-GPU task inside one domain when it fits.
"""

from __future__ import annotations

from collections.abc import Callable


def nvlink_domains(count: int, connected: Callable[[int, int], bool]) -> list[int]:
    """Each GPU's domain number, from a pairwise "are these two NVLink-connected?" test."""
    parent = list(range(count))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(count):
        for j in range(i + 1, count):
            if root(i) != root(j) and connected(i, j):
                parent[max(root(i), root(j))] = min(root(i), root(j))
    numbers: dict[int, int] = {}
    return [numbers.setdefault(root(i), len(numbers)) for i in range(count)]


def simulated_domains(count: int, size: int) -> list[int]:
    """Domains of ``size`` consecutive GPUs (0: one domain of all of them)."""
    return [i // size if size > 0 else 0 for i in range(count)]
