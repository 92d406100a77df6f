"""The supervisor behind ``make up``: private servers, every service, restarts, Ctrl-C.

Start order: Postgres and NATS (unless ``CORRAL_DATABASE_URL`` / ``CORRAL_NATS_URL``
name existing ones; on the stack's own Postgres, the migrations and each service's login
and each node's secret: ``logins.py``), then every service as its own ``python -m``
process with its output in ``$CORRAL_HOME/logs/services/<name>.log`` and its pid in
``$CORRAL_HOME/run/``. A service or server that exits is restarted with a growing delay
(``supervised.py``): Postgres into crash recovery on its data directory, NATS on its
JetStream store. What each is doing, its restarts and last exit are in
``run/supervisor.json`` (the API's services view and ``corral instances`` show it).
SIGINT or SIGTERM stops the services (SIGTERM, then SIGKILL after a grace period), then
the servers. All state lives in ``$CORRAL_HOME``, so the next ``make up`` finds every job
where it was left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from corral.local.logins import StackLogins, prepare_logins
from corral.local.ports import check_port_free, free_ports
from corral.local.postgres import LocalPostgres
from corral.local.problems import StartupProblem
from corral.local.stack_config import NODE_SERVICES, SERVICES, StackConfig
from corral.local.stack_nats import StackNats, is_loopback
from corral.local.supervised import (
    CRASH_LOOP_WINDOW_S,
    MAX_DELAY_S,
    ManagedServer,
    ManagedService,
    Supervised,
    describe_exit,
    kill_process_group,
)
from corral.local.supervisor_state import write_state
from corral.local.tls import server_tls
from shared.bus.identities import node_user


def readable_for_jobs() -> list[Path]:
    """What a job on ``make up``'s node may read wherever it lies: the Python installation
    and virtualenv Corral runs on, and the checkout it runs from (its examples)."""
    import corral  # (where this package lies, not what it offers)

    places = [Path(sys.base_prefix), Path(sys.prefix), Path(corral.__file__).parents[1]]
    system = (Path("/usr"), Path("/bin"), Path("/lib"))
    found = [p.resolve() for p in places]
    return [
        p for p in dict.fromkeys(found) if p != Path("/") and not any(p.is_relative_to(s) for s in system)
    ]


class Supervisor:
    def __init__(self, config: StackConfig, *, out: IO[str] = sys.stdout) -> None:
        self.config = config
        self.out = out
        self.postgres: LocalPostgres | None = None
        self.nats: StackNats | None = None
        self.logins: StackLogins | None = None
        self.processes: list[ManagedService] = []
        self.servers: list[ManagedServer] = []
        self._stopping = False

    # --- servers ---------------------------------------------------------------------

    def start_servers(self) -> tuple[str, str]:
        home = self.config.home
        database_url = self.config.database_url
        if database_url is None:
            host = self.config.pg_host
            tls = None if is_loopback(host) else server_tls(home / "tls", host)
            self.postgres = LocalPostgres(home / "postgres", self.config.pg_port, host=host, tls=tls)
            self.postgres.start(log_file=home / "logs" / "postgres.log")
            self._supervise_server("postgres", self.postgres.start_again, lambda: self._postgres_process())
            database_url = self.postgres.local_url()  # the owner's: the supervisor's alone
            self.logins = prepare_logins(self.postgres, home, self.config.services, self.config.node_ids())
        nats_url = self.config.nats_url
        if nats_url is None:
            check_port_free(self.config.nats_port, "NATS", "CORRAL_NATS_PORT")
            services = [name for name, _ in SERVICES if name not in NODE_SERVICES]
            self.nats = StackNats(
                home, self.config.nats_port, self.config.nats_host, services, self.config.node_ids()
            )
            self.nats.start(log_file=home / "logs" / "nats.log")
            self.nats.follow_minted(database_url)
            self._supervise_server("nats-server", self.nats.start_again, lambda: self._nats_process())
            self.nats.watch_store(self._nats_stores_nothing)
            nats_url = self.nats.url
        return database_url, nats_url

    def _nats_stores_nothing(self, reason: str) -> None:
        """(From the probe's thread.) A server that no longer stores messages is stopped,
        and so restarted like one that died: only a restart clears JetStream's write error."""
        process = self._nats_process()
        self._say(f"nats-server is up but stores nothing: {reason}; restarting it")
        if process is not None and process.returncode is None:
            process.terminate()

    def _postgres_process(self) -> subprocess.Popen[bytes] | None:
        return None if self.postgres is None else self.postgres.process

    def _nats_process(self) -> subprocess.Popen[bytes] | None:
        return None if self.nats is None else self.nats.server.process

    def _supervise_server(
        self, name: str, begin: Callable[[], None], process: Callable[[], subprocess.Popen[bytes] | None]
    ) -> None:
        """Watch a server started just now: restarted through ``begin`` when it dies,
        after what its crash left in its process group is killed."""
        home = self.config.home
        (home / "run").mkdir(parents=True, exist_ok=True)
        server = ManagedServer(
            name,
            "server",
            home / "logs" / ("nats.log" if name == "nats-server" else f"{name}.log"),
            home / "run" / f"{name}.pid",
            begin=begin,
            process=process,
            after_exit=kill_process_group,
        )
        server.adopt()
        self.servers.append(server)

    def nats_env(self, service: str, node_id: str) -> dict[str, str]:
        """Who the process connects to NATS as: its own identity on the stack's NATS; on
        an external NATS, whatever the environment says (the operator's credentials)."""
        if self.nats is None:
            return {}
        return self.nats.env_for(node_user(node_id) if service in NODE_SERVICES else service)

    def database_env(self, service: str, node_id: str) -> dict[str, str]:
        """Who the process connects to Postgres as: its own role on the stack's Postgres;
        on an external one, as ``CORRAL_DATABASE_URL`` says (the operator's logins)."""
        if self.logins is None:
            return {}
        return self.logins.env_for(service, node_id)

    def join_env(self) -> dict[str, str]:
        """What the API tells a machine that joins as a node (node_join.py): this stack's
        bus and database, when it runs both (else it admits none). An operator's own
        ``CORRAL_API_JOIN_*`` (the address other machines reach) wins."""
        if self.nats is None or self.logins is None or "agent" not in self.logins.urls:
            return {}
        database_url = self.logins.urls["agent"]  # (this machine's socket: nodes beside it)
        if self.postgres is not None and self.postgres.tls is not None:
            host = self.config.pg_host
            database_url = self.postgres.remote_url(
                "127.0.0.1" if host == "0.0.0.0" else host, user="corral_agent"
            )
        env = {
            "CORRAL_API_JOIN_NATS_URL": self.nats.url,
            "CORRAL_API_JOIN_DATABASE_URL": database_url,
            "CORRAL_API_JOIN_AGENT_PASSWORD_FILE": self.logins.env_for("agent", "")[
                "CORRAL_DATABASE_PASSWORD_FILE"
            ],
        }
        if self.nats.ca_file is not None:
            env["CORRAL_API_JOIN_NATS_CA_FILE"] = str(self.nats.ca_file)
        return {key: value for key, value in env.items() if key not in os.environ}

    # --- services --------------------------------------------------------------------

    def service_env(
        self,
        name: str,
        database_url: str,
        nats_url: str,
        health_port: int,
        node_id: str | None = None,
        copy: int = 0,
    ) -> dict[str, str]:
        node_id = node_id or self.config.node_id
        several = self.config.simulated_nodes > 1
        env = {
            # Break a simulated GPU of the running node by writing this file (one per node
            # when there are several).
            "CORRAL_EXPORTER_FAULTS_FILE": str(
                self.config.home / (f"gpu-faults-{node_id}.yaml" if several else "gpu-faults.yaml")
            ),
            # Simulated GPUs' processes, as the agent's check of GPU sharers reads them
            # (where NVML is missing): write it to make a sharer use more than its share.
            "CORRAL_GPU_SHARING_PROCESSES_FILE": str(
                self.config.home / (f"gpu-processes-{node_id}.json" if several else "gpu-processes.json")
            ),
            # Where alerts are sent (receivers and routes); re-read when it changes.
            "CORRAL_ALERTER_ROUTING_FILE": str(self.config.home / "routing.yaml"),
            "CORRAL_ALERTER_RULES_FILE": str(self.config.home / "alert-rules.yaml"),
            # Alerts link to the runbooks as this stack's API serves them (docs_pages.py).
            "CORRAL_ALERTER_RUNBOOK_BASE_URL": f"http://127.0.0.1:{self.config.api_port}/docs/runbooks/",
            # A laptop's `make up` (not root) cannot sandbox tasks: they run as its user,
            # and the node says isolation: none. As root, an agent that cannot isolate
            # refuses to start unless this is set by hand.
            "CORRAL_AGENT_ALLOW_UNISOLATED": "false" if os.geteuid() == 0 else "true",
            # Jobs may run the Python Corral runs on and read this checkout (its examples),
            # even where they lie in a private directory (root's home): read-only.
            "CORRAL_AGENT_READABLE_PATHS": ":".join(str(p) for p in readable_for_jobs()),
            **os.environ,
            **self.config.extra_env,
            "CORRAL_HOME": str(self.config.home),
            "CORRAL_DATABASE_URL": database_url,
            "CORRAL_NATS_URL": nats_url,
            **self.nats_env(name, node_id),
            **self.database_env(name, node_id),
            "CORRAL_API_PORT": str(self.config.api_port),
            "CORRAL_HEALTH_PORT": str(health_port),
            "CORRAL_AGENT_NODE_ID": node_id,
            "CORRAL_EXPORTER_NODE_ID": node_id,
            # One machine: tasks reach each other on loopback.
            "CORRAL_EXPORTER_ADDRESS": "127.0.0.1",
            "CORRAL_EXPORTER_SIMULATED_GPUS": str(self.config.simulated_gpus),
            "PYTHONUNBUFFERED": "1",
        }
        if several:  # simulated nodes all, or they would each claim this machine's GPUs
            env["CORRAL_EXPORTER_BACKEND"] = "simulated"
            env["CORRAL_AGENT_WORK_DIR"] = str(self.config.home / "work" / node_id)
        if name == "api":
            del env["CORRAL_HEALTH_PORT"]
            if self.config.api_processes > 1:
                env["CORRAL_API_REUSE_PORT"] = "true"
            env["CORRAL_API_SUPERVISOR_STATE_FILE"] = str(self.config.home / "run" / "supervisor.json")
            env.update(self.join_env())
        if name == "launcher":
            env["CORRAL_LAUNCHER_PROCESSES"] = str(self.config.launcher_processes)
            env["CORRAL_LAUNCHER_PROCESS_INDEX"] = str(copy)
        if name == "exporter":
            del env["CORRAL_DATABASE_URL"]  # it has no use for the database
        return env

    def planned(self) -> list[tuple[str, str, str, str | None, int]]:
        """(process name, service, module, node, copy) of every process to run: a node's
        services once per simulated node (process ``agent-local-2``) when there are several,
        the API and the launcher as many times as ``api_processes`` and
        ``launcher_processes`` say (``api``, ``api-2``...; copy 0, 1...)."""
        nodes = self.config.node_ids()
        copies = {"api": self.config.api_processes, "launcher": self.config.launcher_processes}
        processes: list[tuple[str, str, str, str | None, int]] = []
        for name, module in SERVICES:
            if name not in self.config.services:
                continue
            if name not in NODE_SERVICES:
                named = ((name if n == 0 else f"{name}-{n + 1}", n) for n in range(copies.get(name, 1)))
                processes.extend((process, name, module, None, n) for process, n in named)
            elif len(nodes) == 1:
                processes.append((name, name, module, nodes[0], 0))
            else:
                processes.extend((f"{name}-{node}", name, module, node, 0) for node in nodes)
        return processes

    def start_services(self, database_url: str, nats_url: str) -> None:
        run_dir = self.config.home / "run"
        service_logs = self.config.home / "logs" / "services"
        run_dir.mkdir(parents=True, exist_ok=True)
        service_logs.mkdir(parents=True, exist_ok=True)
        ports = {}
        planned = self.planned()
        # Distinct, one each, and never the API's port (chosen by whoever started us, it
        # is free until the API binds it, so the OS could offer it here too).
        health_ports = iter(free_ports(len(planned), exclude={self.config.api_port}))
        for name, service, module, node, copy in planned:
            env = self.service_env(service, database_url, nats_url, next(health_ports), node, copy)
            ports[name] = int(env.get("CORRAL_HEALTH_PORT") or self.config.api_port)
            managed = ManagedService(
                name, "service", service_logs / f"{name}.log", run_dir / f"{name}.pid", module=module, env=env
            )
            managed.start()
            self.processes.append(managed)
        (run_dir / "health-ports.json").write_text(json.dumps(ports, indent=2) + "\n")
        self._write_state()

    def supervise_once(self) -> None:
        """Reap whatever exited and restart whatever is due: the servers first, which
        the services need."""
        now = time.monotonic()
        changed = False
        for managed in self._supervised():
            if managed.restart_due(now):
                self._restart(managed)
                changed = True
                continue
            if managed.next_start:
                continue
            code = managed.poll()
            if code is not None:
                self._schedule(managed, describe_exit(code))
                changed = True
        if changed:
            self._write_state()

    def _supervised(self) -> list[Supervised]:
        return [*self.servers, *self.processes]

    def _schedule(self, managed: Supervised, how: str, what: str = "exited", fix: str | None = None) -> None:
        delay = managed.exited(how)
        self._say(f"{managed.name} {what} ({how}); restarting in {delay:.1f}s")
        if managed.crash_looping() and not managed.crash_loop_said:
            managed.crash_loop_said = True
            self._say(
                f"{managed.name} is crash-looping: {managed.recent_exits} exits in "
                f"{CRASH_LOOP_WINDOW_S:.0f} s, last {how}; see {managed.log_path}"
                + (f"; fix: {fix}" if fix else "")
                + f" (still restarting, every {MAX_DELAY_S:.0f} s at most)"
            )

    def _restart(self, managed: Supervised) -> None:
        """Start it again; a start that fails (a server refusing its store, a port still
        taken) counts as one more exit of the loop, never the supervisor's end."""
        managed.restarted()
        try:
            managed.start()
        except StartupProblem as exc:
            self._schedule(managed, f"could not start: {_one_line(exc.cause)}", "failed", exc.fix)
            return
        except (RuntimeError, OSError) as exc:
            self._schedule(managed, f"could not start: {_one_line(str(exc))}", "failed")
            return
        if managed.kind == "server":
            self._say(f"{managed.name} is back (pid {managed.pid()}, restart {managed.restarts})")

    def _write_state(self) -> None:
        write_state(self.config.home / "run" / "supervisor.json", [m.view() for m in self._supervised()])

    # --- lifecycle -------------------------------------------------------------------

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._request_stop)
        try:
            self._make_home()
            if "api" in self.config.services:
                check_port_free(self.config.api_port, "API", "CORRAL_PORT")
            database_url, nats_url = self.start_servers()
            self.start_services(database_url, nats_url)
            nodes = self.config.node_ids()
            self._say(
                f"Corral is up: portal and API http://127.0.0.1:{self.config.api_port}/ — admin token in "
                f"{self.config.home / 'admin-token'} — logs in {self.config.home / 'logs'}"
                + (f" — {len(nodes)} simulated nodes, {nodes[0]} … {nodes[-1]}" if len(nodes) > 1 else "")
                + ("" if os.geteuid() == 0 else " — not root: tasks run unisolated, as you")
                + ". Ctrl-C stops it."
            )
            while not self._stopping:
                self.supervise_once()
                time.sleep(0.2)
        finally:
            self.stop()
        return 0

    def _make_home(self) -> None:
        try:
            self.config.home.mkdir(parents=True, exist_ok=True)
            (self.config.home / "logs").mkdir(exist_ok=True)
        except OSError as exc:
            raise StartupProblem(
                "CORRAL_HOME",
                f"{self.config.home} cannot be made or written ({exc.strerror})",
                "set CORRAL_HOME to a directory you can write",
            ) from exc

    def _request_stop(self, *_: object) -> None:
        self._stopping = True

    def stop(self, grace_s: float = 10.0) -> None:
        for managed in reversed(self.processes):
            managed.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for managed in self.processes:
            if managed.process is None:
                continue
            try:
                managed.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                managed.process.kill()
                managed.process.wait()
            managed.close_log()
            managed.pid_path.unlink(missing_ok=True)
        if self.nats is not None:
            self.nats.stop()
        if self.postgres is not None:
            self.postgres.stop()
        for server in self.servers:
            server.pid_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # (a home that could not be made has none)
            (self.config.home / "run" / "supervisor.json").unlink(missing_ok=True)
        self._say("Corral stopped.")

    def _say(self, message: str) -> None:
        print(message, file=self.out, flush=True)


def _one_line(said: str) -> str:
    """A message as one terminal line (and one ``last_exit`` string)."""
    return " ".join(said.split())
