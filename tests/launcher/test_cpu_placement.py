"""Cores and NUMA nodes for tasks, on fake machines read from fake sysfs trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.launcher.agent.sandbox.cpus import Topology, place_cpus
from tests.launcher.sandbox_trees import machine


@pytest.fixture
def dgx(tmp_path: Path) -> Topology:
    """2 sockets x 16 cores x 2 threads, GPUs 0-3 on socket 0 and 4-7 on socket 1."""
    return Topology.read(machine(tmp_path, sockets=2, cores_per_socket=16, threads=2, gpus_per_socket=4))


def _gpu_node(topology: Topology, index: int) -> int:
    return topology.gpu_nodes[sorted(topology.gpu_nodes)[index]]


def test_sysfs_gives_nodes_siblings_and_each_gpus_node(dgx: Topology) -> None:
    assert sorted(dgx.nodes) == [0, 1]
    assert dgx.nodes[0] == (*range(0, 16), *range(32, 48))
    assert dgx.siblings[3] == (3, 35)
    assert [_gpu_node(dgx, i) for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert dgx.cpu_count == 64


def test_a_gpu_task_gets_whole_cores_on_its_gpus_node_and_that_nodes_memory(dgx: Topology) -> None:
    placed = place_cpus(dgx, 8, {}, gpu_numa_nodes={1})
    assert placed.cpus == (16, 17, 18, 19, 48, 49, 50, 51)  # 4 whole cores: both threads of each
    assert placed.mems == (1,)
    assert placed.exclusive
    assert placed.aligned


def test_cores_held_by_other_tasks_are_not_given_again(dgx: Topology) -> None:
    first = place_cpus(dgx, 4, {}, gpu_numa_nodes={0})
    busy = dict.fromkeys(first.cpus, 1)
    second = place_cpus(dgx, 4, busy, gpu_numa_nodes={0})
    assert not set(first.cpus) & set(second.cpus)
    assert set(second.cpus) <= set(dgx.nodes[0])


def test_an_odd_count_takes_half_a_core_last(dgx: Topology) -> None:
    placed = place_cpus(dgx, 3, {}, gpu_numa_nodes={0})
    assert placed.cpus == (0, 1, 32)  # one whole core (0, 32), then the first of the next


def test_a_full_gpu_node_spills_over_unless_numa_is_required(dgx: Topology) -> None:
    busy = dict.fromkeys(dgx.nodes[0][:-2], 1)  # two threads (one core) left on node 0
    preferred = place_cpus(dgx, 4, busy, gpu_numa_nodes={0})
    assert len(preferred.cpus) == 4
    assert not preferred.aligned
    assert "another" in preferred.note
    assert set(preferred.cpus) & set(dgx.nodes[1])

    required = place_cpus(dgx, 4, busy, gpu_numa_nodes={0}, numa_required=True)
    assert set(required.cpus) <= set(dgx.nodes[0])
    assert required.aligned
    assert not required.exclusive
    assert "sharing" in required.note


def test_a_cpu_only_task_stays_on_one_node(dgx: Topology) -> None:
    busy = dict.fromkeys(dgx.nodes[0][:20], 1)
    placed = place_cpus(dgx, 6, busy)
    assert set(placed.cpus) <= set(dgx.nodes[1])
    assert placed.mems == (1,)


def test_one_socket_without_hyperthreads(tmp_path: Path) -> None:
    small = Topology.read(machine(tmp_path, sockets=1, cores_per_socket=4, threads=1, gpus_per_socket=2))
    assert small.siblings[2] == (2,)
    placed = place_cpus(small, 2, {}, gpu_numa_nodes={0})
    assert placed.cpus == (0, 1)
    assert placed.mems == (0,)


def test_one_socket_with_hyperthreads(tmp_path: Path) -> None:
    small = Topology.read(machine(tmp_path, sockets=1, cores_per_socket=4, threads=2))
    assert small.siblings[1] == (1, 5)
    assert place_cpus(small, 2, {}).cpus == (0, 4)  # one whole core, not halves of two


def test_more_cpus_than_free_share_the_least_used_and_never_all_for_one_cpu(tmp_path: Path) -> None:
    two = Topology.read(machine(tmp_path, sockets=1, cores_per_socket=2, threads=1))
    busy = {0: 3, 1: 2}
    placed = place_cpus(two, 1, busy)
    assert placed.cpus == (1,)
    assert not placed.exclusive
    assert "too few free cores" in placed.note
    assert place_cpus(two, 64, {}).cpus == (0, 1)  # asked for more than exist: what exists


def test_a_fraction_gets_one_core_not_held_exclusively(dgx: Topology) -> None:
    placed = place_cpus(dgx, 0.5, {})
    assert len(placed.cpus) == 1
    assert not placed.exclusive
