"""What ``make up`` runs: its services, and the settings an operator gives it.

``StackConfig`` is read from the environment once (``CORRAL_HOME``, the ports, how many
simulated nodes, which services) and checked there, so a bad value stops ``make up``
with a ``StartupProblem`` that names the variable before anything starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from corral.local.problems import StartupProblem

# (name, module). The exporter and agent together are "the node" on this machine.
NODE_SERVICES = frozenset({"exporter", "agent"})
MAX_SIMULATED_NODES = 64
MAX_API_PROCESSES = 16
MAX_LAUNCHER_PROCESSES = 16
SERVICES: tuple[tuple[str, str], ...] = (
    ("api", "services.api"),
    ("scheduler", "services.scheduler"),
    ("launcher", "services.launcher"),
    ("monitor", "services.monitor"),
    ("alerter", "services.alerter"),
    ("exporter", "services.monitor.exporter"),
    ("agent", "services.launcher.agent"),
)


@dataclass
class StackConfig:
    home: Path
    api_port: int = 8080
    database_url: str | None = None
    nats_url: str | None = None
    pg_port: int = 5433
    # Where the stack's own Postgres listens besides loopback (other machines' node
    # agents): then with TLS only.
    pg_host: str = "127.0.0.1"
    nats_port: int = 4222
    # Where the stack's own NATS listens: beyond loopback (other machines' nodes), it
    # speaks only TLS.
    nats_host: str = "127.0.0.1"
    simulated_gpus: int = 8
    node_id: str = "local"
    # More than one: that many simulated nodes on this machine (an exporter and an agent
    # each, named <node_id>-1 ... <node_id>-N), to try multi-node gangs and placement.
    simulated_nodes: int = 1
    # More than one: that many API processes sharing its port (SO_REUSEPORT: the kernel
    # spreads connections among them), named api, api-2 ... api-N.
    api_processes: int = 1
    # More than one: that many launcher processes sharing its work (launcher, launcher-2
    # ...; services/launcher/shards.py).
    launcher_processes: int = 1
    extra_env: dict[str, str] = field(default_factory=dict)
    # Run only these services (all by default), e.g. a GPU machine that is only a node.
    services: tuple[str, ...] = tuple(name for name, _ in SERVICES)

    @classmethod
    def from_environment(cls) -> StackConfig:
        env = os.environ
        return cls(
            home=Path(env.get("CORRAL_HOME", ".corral")).resolve(),
            api_port=_port(env, "CORRAL_PORT", 8080),
            database_url=env.get("CORRAL_DATABASE_URL") or None,
            nats_url=env.get("CORRAL_NATS_URL") or None,
            pg_port=_port(env, "CORRAL_PG_PORT", 5433),
            pg_host=env.get("CORRAL_PG_HOST") or "127.0.0.1",
            nats_port=_port(env, "CORRAL_NATS_PORT", 4222),
            nats_host=env.get("CORRAL_NATS_HOST") or "127.0.0.1",
            simulated_gpus=_whole_number(env, "CORRAL_SIMULATED_GPUS", 8, 0, 64),
            node_id=env.get("CORRAL_NODE_ID", "local"),
            simulated_nodes=_whole_number(env, "CORRAL_SIMULATED_NODES", 1, 1, MAX_SIMULATED_NODES),
            api_processes=_whole_number(env, "CORRAL_API_PROCESSES", 1, 1, MAX_API_PROCESSES),
            launcher_processes=_whole_number(env, "CORRAL_LAUNCHER_PROCESSES", 1, 1, MAX_LAUNCHER_PROCESSES),
            services=_services(env.get("CORRAL_SERVICES", "")),
        )

    def node_ids(self) -> tuple[str, ...]:
        if self.simulated_nodes == 1:
            return (self.node_id,)
        return tuple(f"{self.node_id}-{n}" for n in range(1, self.simulated_nodes + 1))


def _whole_number(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    given = env.get(name, str(default))
    try:
        value = int(given)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise StartupProblem(
            "settings",
            f"{name} must be a whole number from {low} to {high}, got {given!r}",
            f"set {name} to such a number, or unset it for {default}",
        )
    return value


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    return _whole_number(env, name, default, 1, 65535)


def _services(listed: str) -> tuple[str, ...]:
    known = [name for name, _ in SERVICES]
    wanted = tuple(name.strip() for name in listed.split(",") if name.strip())
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise StartupProblem(
            "settings",
            f"CORRAL_SERVICES names unknown services {unknown}",
            f"choose from {', '.join(known)}, or unset it to run them all",
        )
    return wanted or tuple(known)
