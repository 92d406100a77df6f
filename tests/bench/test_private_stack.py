"""The benchmarks' private stack (bench/stack.py) starts again on fresh ports when a port
it chose free is taken before the stack binds it, as an outgoing connection's ephemeral
port can be on a busy machine."""

from __future__ import annotations

import socket

import httpx
import pytest

import bench.stack as stack_module
from bench.stack import private_stack
from corral.local.ports import free_port

pytestmark = pytest.mark.e2e


@pytest.mark.timeout(240)
def test_a_port_taken_before_the_stack_binds_it_is_chosen_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        chosen_free = free_port
        # The API's, Postgres' and then NATS's port: NATS is handed the taken one, once.
        picks = iter([chosen_free(), chosen_free(), taken])
        monkeypatch.setattr(stack_module, "free_port", lambda: next(picks, None) or chosen_free())
        with private_stack(gpus=1) as stack:
            assert stack._nats_port != taken
            assert httpx.get(f"{stack.base_url}/readyz", timeout=5).status_code == 200
