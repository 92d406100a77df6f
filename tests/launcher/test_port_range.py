"""Ports handed to tasks stay out of the ranges the node's kernel and Kubernetes use."""

from __future__ import annotations

from pathlib import Path

from services.launcher.attempts import PORT_RANGE

KUBERNETES_NODE_PORTS = range(30000, 32768)  # kube-apiserver's default --service-node-port-range


def test_task_ports_are_outside_this_machines_ephemeral_range() -> None:
    """The kernel gives outgoing connections local ports from this range: a task port
    inside it can be held by any client socket on the node when the task binds it."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert PORT_RANGE.stop <= low or PORT_RANGE.start > high, (PORT_RANGE, low, high)


def test_task_ports_are_outside_kubernetes_node_ports() -> None:
    assert PORT_RANGE.stop <= KUBERNETES_NODE_PORTS.start or PORT_RANGE.start >= KUBERNETES_NODE_PORTS.stop
    assert len(PORT_RANGE) >= 5000  # room for every task of a busy node
