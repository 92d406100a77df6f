"""NVLink domains from pairwise links (what NVML's peer-to-peer status gives) and for the
simulated GPUs."""

from __future__ import annotations

import pytest

from services.monitor.exporter.topology import nvlink_domains, simulated_domains


def _linked(*pairs: tuple[int, int]) -> set[frozenset[int]]:
    return {frozenset(pair) for pair in pairs}


@pytest.mark.parametrize(
    ("count", "links", "domains"),
    [
        (8, {frozenset((i, j)) for i in range(8) for j in range(i + 1, 8)}, [0] * 8),  # NVSwitch
        (4, _linked((0, 1), (2, 3)), [0, 0, 1, 1]),  # bridged pairs
        (4, _linked((0, 3), (3, 1)), [0, 0, 1, 0]),  # joined through another GPU
        (3, set(), [0, 1, 2]),  # PCIe only: a domain each
        (0, set(), []),
    ],
)
def test_domains_are_the_connected_groups_numbered_by_lowest_gpu(
    count: int, links: set[frozenset[int]], domains: list[int]
) -> None:
    assert nvlink_domains(count, lambda i, j: frozenset((i, j)) in links) == domains


def test_simulated_domains() -> None:
    assert simulated_domains(8, 4) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert simulated_domains(4, 0) == [0, 0, 0, 0]
