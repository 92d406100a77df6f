"""The runtime every Corral service shares: resources, root tasks, health, shutdown.

A service's composition root (``services/<name>/app.py``) does::

    async with service_resources("scheduler", settings.common) as res:
        async with asyncio.TaskGroup() as tg:
            res.start_common_tasks(tg)          # health endpoint, outbox relay, liveness
            tg.create_task(my_loop(res))        # the service's own loops

``service_resources`` builds telemetry, the Postgres pool (running migrations), the NATS
bus (ensuring streams) and the dead-letter sink, and closes them in reverse order. A node
agent, whose database role may touch no table (README, "Security model"), brings its own
liveness and dead letters and runs no outbox relay: the functions it calls write its
events' rows, and the launcher's relay publishes them.
``run_service`` turns SIGTERM/SIGINT into a clean cancellation (exit 0) and a root task
that dies into exit status 1, so the supervisor restarts the process. There are no
untracked tasks: everything runs under the one TaskGroup.

Services run on uvloop's event loop: they mostly wait on sockets (Postgres, NATS, HTTP),
and uvloop does an asyncpg round trip for less CPU than asyncio's own loop
(docs/performance.md has the figure). The node agent too: it starts its tasks with ``subprocess.Popen``
and awaits their exits on pidfds, not through uvloop's subprocess API, which forks
(services/launcher/agent/processes.py). Tests that run a service's parts in-process use
pytest's standard loop; nothing in Corral depends on which loop it is.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass, field

import uvicorn
import uvloop
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from shared.aio import raise_if_cancelling
from shared.bus.consumer import DeadLetterSink
from shared.bus.nats import NatsBus
from shared.db.migrations import apply_migrations
from shared.db.pool import DATABASE_ERRORS, Database, connect
from shared.deadletters import PostgresDeadLetters
from shared.liveness import Liveness
from shared.metrics import metrics_route
from shared.outbox import OutboxRelay, publishing_on_commit
from shared.settings import CommonSettings, HealthSettings
from shared.telemetry import setup_telemetry, shutdown_telemetry

log = logging.getLogger(__name__)

ReadinessCheck = Callable[[], Awaitable[bool]]


@dataclass
class Health:
    """Liveness is "the event loop answers"; readiness runs the named checks."""

    service: str
    checks: dict[str, ReadinessCheck] = field(default_factory=dict)
    # More endpoints served beside /healthz, /readyz and /metrics (the monitor's own
    # /metrics, which replaces the default one).
    extra_routes: list[Route] = field(default_factory=list)

    async def readiness(self) -> tuple[bool, dict[str, bool]]:
        results = {name: await check() for name, check in self.checks.items()}
        return all(results.values()), results


def health_routes(health: Health) -> list[Route]:
    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "service": health.service})

    async def readyz(_: Request) -> JSONResponse:
        ready, results = await health.readiness()
        return JSONResponse(
            {"ready": ready, "service": health.service, "checks": results},
            status_code=200 if ready else 503,
        )

    routes = [Route("/healthz", healthz), Route("/readyz", readyz), *health.extra_routes]
    if not any(route.path == "/metrics" for route in health.extra_routes):
        routes.append(metrics_route())  # the monitor serves its own, which includes these
    return routes


class EmbeddedServer(uvicorn.Server):
    """uvicorn run as one task among others: signals belong to ``run_service``."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def install_signal_handlers(self) -> None:
        return None


class _DenialIsAnAnswer(logging.Filter):
    """uvicorn's WebSocket protocol logs "ASGI callable returned without completing
    handshake" at ERROR for a WebSocket refused with an HTTP answer of its own (ASGI's
    ``websocket.http.response``: the API's 403 problem for a refused exec stream), which is
    a complete answer, not a fault. Only that line is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing handshake" not in record.getMessage()


_DENIAL_FILTER = _DenialIsAnAnswer()


async def serve_http(app: Starlette, host: str, port: int, name: str, *, reuse_port: bool = False) -> None:
    """Serve ``app`` on ``host:port`` until cancelled; ``reuse_port``: on a socket other
    processes of this machine may bind too (``SO_REUSEPORT``), each taking a share of
    the connections."""
    uvicorn_errors = logging.getLogger("uvicorn.error")
    if _DENIAL_FILTER not in uvicorn_errors.filters:
        uvicorn_errors.addFilter(_DENIAL_FILTER)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    server = EmbeddedServer(config)
    try:
        sockets = [_shared_listener(host, port)] if reuse_port else None
        await server.serve(sockets=sockets)
    except OSError as exc:
        raise RuntimeError(f"{name}: could not serve HTTP on {host}:{port} ({exc})") from exc
    except SystemExit as exc:
        # uvicorn calls sys.exit(1) when it cannot bind; inside a TaskGroup that must be
        # an ordinary error, so the group fails and the process exits non-zero.
        raise RuntimeError(f"{name}: could not serve HTTP on {host}:{port}") from exc
    finally:
        server.should_exit = True
    if not server.started:
        raise RuntimeError(f"{name}: could not serve HTTP on {host}:{port}")


def _shared_listener(host: str, port: int) -> socket.socket:
    """A bound TCP socket on ``host:port`` that other processes may bind as well."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind(address)
    except OSError:
        listener.close()
        raise
    return listener


async def serve_health(health: Health, settings: HealthSettings) -> None:
    if settings.port is None:
        await asyncio.Event().wait()  # endpoint switched off; idle like any root task
        return
    await serve_http(Starlette(routes=health_routes(health)), settings.host, settings.port, health.service)


async def every(interval_s: float, action: Callable[[], Awaitable[object]], what: str) -> None:
    """Run ``action`` now and then every ``interval_s``, forever (a root task's body).

    A database or network failure is logged and retried next time: a reconcile loop must
    outlive a Postgres restart. Anything else is a bug and kills the root task.
    """
    while True:
        try:
            await action()
        except DATABASE_ERRORS as exc:
            raise_if_cancelling()  # a cancelled query can surface as a connection error
            log.warning("%s failed (%s); will retry in %.0fs", what, exc, interval_s)
        await asyncio.sleep(interval_s)


@dataclass
class ServiceResources:
    name: str
    settings: CommonSettings
    db: Database
    bus: NatsBus
    dead_letters: DeadLetterSink
    relay: OutboxRelay | None  # None: this process relays no outbox (a node agent)
    health: Health
    liveness: Liveness

    def start_common_tasks(self, tg: asyncio.TaskGroup) -> None:
        tg.create_task(serve_health(self.health, self.settings.health), name="health")
        if self.relay is not None:
            tg.create_task(self.relay.run(), name="outbox-relay")
        tg.create_task(self.liveness.run(), name="liveness")


LivenessFactory = Callable[[Database, str, float], Liveness]
DeadLettersFactory = Callable[[Database], DeadLetterSink]


@asynccontextmanager
async def service_resources(
    name: str,
    settings: CommonSettings,
    *,
    event_source: str | None = None,
    relay: bool = True,
    liveness: LivenessFactory = Liveness,
    dead_letters: DeadLettersFactory = PostgresDeadLetters,
    relay_answers: Callable[[int], bool] = lambda _part: True,
) -> AsyncIterator[ServiceResources]:
    """Open everything a service needs; ``event_source`` is the ``source`` of its events
    (default ``corral/<name>``), which picks the NOTIFY channel its outbox relay hears.
    ``relay=False``, ``liveness`` and ``dead_letters``: a node agent's (module doc).
    ``relay_answers``: the outbox partitions whose NOTIFYs this process's relay answers,
    where several processes of the service split them (``OutboxRelay``)."""
    provider = setup_telemetry(name, settings.telemetry)
    async with AsyncExitStack() as stack:
        stack.callback(shutdown_telemetry, provider)
        db = await connect(settings.database)
        stack.push_async_callback(db.close)
        if settings.database.migrate_on_start:
            await apply_migrations(db)
        bus = await NatsBus.connect(settings.nats, name=f"corral-{name}")
        stack.push_async_callback(bus.close)
        await bus.ensure_streams()

        async def nats_connected() -> bool:
            return bus.nc.is_connected

        health = Health(name, {"postgres": db.ping, "nats": nats_connected})
        source = event_source or f"corral/{name}"
        outbox = OutboxRelay(db, bus, source=source, answers=relay_answers) if relay else None
        # What this process commits, its relay publishes at once (shared/outbox/), once
        # it runs (``start_common_tasks``): the tasks started in this block see it.
        with publishing_on_commit(outbox) if outbox is not None else nullcontext():
            yield ServiceResources(
                name=name,
                settings=settings,
                db=db,
                bus=bus,
                dead_letters=dead_letters(db),
                relay=outbox,
                health=health,
                liveness=liveness(db, name, settings.health.liveness_interval_s),
            )
        log.info("%s shutting down", name)


def run_service(name: str, main: Callable[[], Awaitable[None]]) -> int:
    """Run ``main`` on uvloop until SIGTERM/SIGINT (exit 0) or until a root task dies
    (exit 1)."""

    async def runner() -> int:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        assert me is not None
        stopping = asyncio.Event()

        def stop() -> None:
            if not stopping.is_set():
                stopping.set()
                me.cancel()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        try:
            await main()
        except asyncio.CancelledError:
            if stopping.is_set():
                return 0
            raise
        return 0

    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as loop_runner:
            return loop_runner.run(runner())
    except KeyboardInterrupt:
        return 0
    except BaseException:
        logging.getLogger(name).exception("%s: a root task died; exiting 1", name)
        return 1
