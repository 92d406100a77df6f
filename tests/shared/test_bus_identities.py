"""Each bus identity against a real NATS with authorisation: what it must not do is
refused by the server, and what its service needs works (the e2e stacks run every
service on its own identity too)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import bcrypt
import nats
import nats.errors
import nats.js.errors
import pytest
import trustme
from nats.aio.client import Client
from nats.js import api

from corral.local.bus_users import chart_authorization, password_file, stack_users, write_secret
from corral.local.nats import LocalNats, NatsUser
from corral.local.ports import free_port
from corral.local.stack_nats import StackNats
from corral.local.tls import ServerTls
from services.alerter.handlers import ALERT_ACTIONS, JOB_EVENTS, NODE_EVENTS, TASK_EVENTS
from services.launcher.agent.app import assignments_consumers
from services.launcher.app import KUBERNETES_ASSIGNMENTS
from services.launcher.handlers import CONSUMER as LAUNCHER_EVENTS
from services.monitor.handlers import NODE_COMMANDS
from shared.bus.credentials import password_hash
from shared.bus.identities import (
    ADMIN,
    INTEGRATOR_PREFIX,
    SERVICES,
    inbox_prefix,
    integrator_permissions,
    node_user,
    service_permissions,
)
from shared.bus.nats import NatsBus
from shared.bus.protocol import ConsumerConfig
from shared.errors import TransientError
from shared.settings import NatsSettings

INTEGRATOR = INTEGRATOR_PREFIX + "dashboards"


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[tuple[LocalNats, Path]]:
    """A NATS admitting the admin, every service, nodes a and b, and an integrator
    reading the jobs stream; streams made by the admin, as ``make up`` does."""
    users = stack_users(tmp_path, SERVICES, ["a", "b"])
    secret = "integrator-secret"
    write_secret(password_file(tmp_path, INTEGRATOR), secret)
    users.append(
        NatsUser(INTEGRATOR, password_hash(secret), integrator_permissions("dashboards", ["CORRAL_JOBS"]))
    )
    server = LocalNats(tmp_path / "nats", free_port(), users=users)
    server.start()
    try:
        admin = await NatsBus.connect(settings(server, tmp_path, ADMIN))
        await admin.ensure_streams()
        await admin.close()
        yield server, tmp_path
    finally:
        server.stop()


def settings(server: LocalNats, home: Path, user: str) -> NatsSettings:
    return NatsSettings(
        url=server.url, user=user, password_file=password_file(home, user), connect_timeout_s=3
    )


class RecordingClient:
    """A raw connection as ``user`` that records what the server refused."""

    def __init__(self, nc: Client, refusals: list[str]) -> None:
        self.nc = nc
        self.refusals = refusals

    async def refused(self, action: Callable[[Client], Awaitable[object]]) -> str:
        """Run ``action`` and return the server's refusal of it (fails if none came)."""
        before = len(self.refusals)
        with contextlib.suppress(nats.errors.TimeoutError, TimeoutError, nats.errors.NoRespondersError):
            await action(self.nc)
            await self.nc.flush()
        for _ in range(100):
            if len(self.refusals) > before:
                return self.refusals[-1]
            await asyncio.sleep(0.02)
        raise AssertionError("the server accepted it")


@contextlib.asynccontextmanager
async def connected(server: LocalNats, home: Path, user: str) -> AsyncIterator[RecordingClient]:
    refusals: list[str] = []

    async def record(exc: Exception) -> None:
        refusals.append(str(exc))

    nc = await nats.connect(
        server.url,
        user=user,
        password=password_file(home, user).read_text().strip(),
        inbox_prefix=inbox_prefix(user),
        error_cb=record,
        allow_reconnect=False,
    )
    try:
        yield RecordingClient(nc, refusals)
    finally:
        await nc.close()


async def refused_connection(url: str, **credentials: str) -> str:
    """Why a connection failed (a client that failed to connect still holds its socket:
    closed here)."""
    nc = Client()
    try:
        connecting = nc.connect(url, allow_reconnect=False, connect_timeout=2, **credentials)  # type: ignore[arg-type]
        await asyncio.wait_for(connecting, 5)
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        return repr(exc)
    finally:
        await nc.close()
    raise AssertionError("the server accepted the connection")


def publish(subject: str) -> Callable[[Client], Awaitable[object]]:
    return lambda nc: nc.publish(subject, b"{}")


def subscribe(subject: str) -> Callable[[Client], Awaitable[object]]:
    return lambda nc: nc.subscribe(subject)


def create_consumer(stream: str, name: str, only: str) -> Callable[[Client], Awaitable[object]]:
    config = api.ConsumerConfig(name=name, durable_name=name, filter_subject=only)
    return lambda nc: nc.jetstream(timeout=0.5).add_consumer(stream, config)


def pull(stream: str, durable: str) -> Callable[[Client], Awaitable[object]]:
    return lambda nc: nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}", b"1")


@pytest.mark.slow
async def test_a_connection_without_or_with_wrong_credentials_is_refused(
    secured: tuple[LocalNats, Path], caplog: pytest.LogCaptureFixture
) -> None:
    server, home = secured
    assert "Authorization Violation" in await refused_connection(server.url)
    wrong = home / "wrong.password"
    write_secret(wrong, "not-the-password")
    connecting = asyncio.create_task(
        NatsBus.connect(NatsSettings(url=server.url, user="api", password_file=wrong, connect_timeout_s=1))
    )
    # It does not crash: it says why, and tries again (backing off) until cancelled.
    await asyncio.sleep(2.5)
    assert not connecting.done()
    connecting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await connecting
    said = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("NATS refused user 'api'" in line and str(wrong) in line for line in said), said
    with pytest.raises(TransientError, match="cannot read the NATS password file"):
        await NatsBus.connect(NatsSettings(url=server.url, user="api", password_file=home / "missing"))


@pytest.mark.parametrize(
    ("user", "forbidden"),
    [
        ("api", publish("corral.job.scheduled.job-1")),  # a scheduler decision
        ("api", publish("corral.task.assigned.a")),
        ("scheduler", publish("corral.task.assigned.a")),
        ("scheduler", publish("corral.job.cancel_requested.job-1")),  # (job.submitted: MAY_PRECEDE)
        ("launcher", publish("corral.job.scheduled.job-1")),
        ("monitor", publish("corral.job.succeeded.job-1")),
        ("alerter", publish("corral.job.cancel_requested.job-1")),
        ("alerter", subscribe("corral.logs.a")),
        ("api", subscribe("_INBOX_scheduler.>")),  # another's replies
        (node_user("a"), publish("corral.metrics.node.b")),  # another node's heartbeat
        (node_user("a"), publish("corral.task.started.a")),  # lifecycle: via Postgres only
        (node_user("a"), publish("corral.job.succeeded.job-1")),
        (node_user("a"), subscribe("corral.logs.b")),
        # another node's interactive streams: its keystrokes, its open requests, its output
        (node_user("a"), subscribe("corral.interactive.b.in.0123456789abcdef0123456789abcdef")),
        (node_user("a"), subscribe("corral.interactive.b.open")),
        # another node's artifacts (its tasks' uploads and inputs), or answering for the launcher
        (node_user("a"), publish("corral.artifacts.b.upload")),
        (node_user("a"), publish("corral.artifacts.b.blob")),
        (node_user("a"), subscribe("corral.artifacts.a.upload")),
        ("api", publish("corral.artifacts.a.blob")),
        (node_user("a"), publish("corral.interactive.b.out.0123456789abcdef0123456789abcdef")),
        (node_user("a"), publish("corral.interactive.a.in.0123456789abcdef0123456789abcdef")),
        (INTEGRATOR, subscribe("corral.interactive.a.out.0123456789abcdef0123456789abcdef")),
        ("scheduler", publish("corral.interactive.a.open")),
        (node_user("a"), subscribe("corral.>")),
        (node_user("a"), subscribe("_INBOX_api.>")),
        (node_user("a"), create_consumer("CORRAL_JOBS", "agent-b", "corral.task.assigned.b")),
        # its own consumer's name, with a wider filter than its own work
        (node_user("a"), create_consumer("CORRAL_JOBS", "agent-a", "corral.task.assigned.>")),
        (node_user("a"), pull("CORRAL_JOBS", "launcher")),  # stealing the launcher's work
        (INTEGRATOR, publish("corral.job.submitted.job-1")),
        (INTEGRATOR, pull("CORRAL_JOBS", "launcher")),
        (INTEGRATOR, create_consumer("CORRAL_NODES", INTEGRATOR, "corral.node.>")),  # not given
        (INTEGRATOR, create_consumer("CORRAL_JOBS", "launcher", "corral.job.>")),
    ],
)
async def test_each_identity_is_refused_what_it_must_not_do(
    secured: tuple[LocalNats, Path], user: str, forbidden: Callable[[Client], Awaitable[object]]
) -> None:
    server, home = secured
    async with connected(server, home, user) as client:
        refusal = await client.refused(forbidden)
    assert "permissions violation" in refusal


async def test_each_service_and_node_can_use_its_own_consumers(secured: tuple[LocalNats, Path]) -> None:
    """The consumers each service really declares, created and read under its identity."""
    server, home = secured
    own: dict[str, list[ConsumerConfig]] = {
        "launcher": [LAUNCHER_EVENTS, KUBERNETES_ASSIGNMENTS],
        "monitor": [NODE_COMMANDS],
        "alerter": [JOB_EVENTS, TASK_EVENTS, NODE_EVENTS, ALERT_ACTIONS],
        node_user("a"): assignments_consumers("a"),
    }
    for user, consumers in own.items():
        bus = await NatsBus.connect(settings(server, home, user))
        try:
            await bus.ensure_streams()  # (present already: only looked at)
            for config in consumers:
                subscription = await bus.subscribe(config)
                assert await subscription.fetch(1, timeout_s=0.1) == []
        finally:
            await bus.close()


async def test_a_node_gets_its_work_and_answers_its_log_questions_only(
    secured: tuple[LocalNats, Path],
) -> None:
    server, home = secured
    admin = await NatsBus.connect(settings(server, home, ADMIN))
    node = await NatsBus.connect(settings(server, home, node_user("a")))
    try:
        [assigned, _] = assignments_consumers("a")
        subscription = await node.subscribe(assigned)
        await admin.publish("corral.task.assigned.b", b"{}", msg_id="for-b")
        await admin.publish("corral.task.assigned.a", b"{}", msg_id="for-a")
        [delivery] = await subscription.fetch(5, timeout_s=1.0)
        assert delivery.subject == "corral.task.assigned.a"
        await delivery.ack()

        async def answer(question: bytes) -> bytes:
            return b"log of " + question

        answering = asyncio.create_task(node.answer("corral.logs.a", "logs", answer))
        await asyncio.sleep(0.2)
        assert await admin.request("corral.logs.a", b"t1", timeout_s=2) == b"log of t1"
        answering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await answering
        heartbeat = await node.js.publish("corral.metrics.node.a", b"{}")
        assert heartbeat.stream == "CORRAL_METRICS"
    finally:
        await node.close()
        await admin.close()


async def test_a_node_asks_the_launcher_about_its_own_artifacts(secured: tuple[LocalNats, Path]) -> None:
    server, home = secured
    launcher = await NatsBus.connect(settings(server, home, "launcher"))
    node = await NatsBus.connect(settings(server, home, node_user("a")))
    try:

        async def answer(question: bytes) -> bytes:
            return b"inputs for " + question

        answering = asyncio.create_task(launcher.answer("corral.artifacts.*.>", "launcher-artifacts", answer))
        await asyncio.sleep(0.2)
        assert await node.request("corral.artifacts.a.inputs", b"att-1", timeout_s=2) == b"inputs for att-1"
        answering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await answering
    finally:
        await node.close()
        await launcher.close()


async def test_an_integrator_reads_its_stream_through_its_own_consumer(
    secured: tuple[LocalNats, Path],
) -> None:
    server, home = secured
    admin = await NatsBus.connect(settings(server, home, ADMIN))
    reader = await NatsBus.connect(settings(server, home, INTEGRATOR))
    try:
        await admin.publish("corral.job.failed.job-1", b'{"n": 1}', msg_id="e1")
        config = ConsumerConfig(
            stream="CORRAL_JOBS", durable=INTEGRATOR, filter_subjects=("corral.job.>",), deliver_all=True
        )
        subscription = await reader.subscribe(config)
        [delivery] = await subscription.fetch(1, timeout_s=1.0)
        assert delivery.data == b'{"n": 1}'
        await delivery.ack()
    finally:
        await reader.close()
        await admin.close()


async def test_a_removed_user_is_disconnected_when_nats_reloads(secured: tuple[LocalNats, Path]) -> None:
    server, home = secured
    async with connected(server, home, node_user("b")) as client:
        assert server.users is not None
        server.reload([u for u in server.users if u.name != node_user("b")])
        for _ in range(100):
            if not client.nc.is_connected:
                break
            await asyncio.sleep(0.05)
        assert not client.nc.is_connected
    password = password_file(home, node_user("b")).read_text().strip()
    assert "Authorization Violation" in await refused_connection(
        server.url, user=node_user("b"), password=password
    )


@pytest.mark.slow
async def test_nats_beyond_loopback_speaks_only_tls_signed_by_the_ca_it_is_given(tmp_path: Path) -> None:
    """A CA made here (trustme): a client trusting it connects; one that does not, or
    that speaks plain NATS, is refused."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    files = ServerTls(tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server-key.pem")
    ca.cert_pem.write_to_path(str(files.ca_file))
    cert.cert_chain_pems[0].write_to_path(str(files.cert_file))
    cert.private_key_pem.write_to_path(str(files.key_file))
    users = stack_users(tmp_path, ["api"], [])
    server = LocalNats(tmp_path / "nats", free_port(), users=users, tls=files)
    server.start()
    try:
        assert server.url.startswith("tls://")
        trusted = settings(server, tmp_path, "api").model_copy(update={"ca_file": files.ca_file})
        bus = await NatsBus.connect(trusted)
        assert bus.nc.is_connected
        await bus.close()
        with pytest.raises(TransientError, match="CERTIFICATE_VERIFY_FAILED"):
            await NatsBus.connect(settings(server, tmp_path, "api"))  # the system's CAs only
        # Plain NATS, by hand: the server demands TLS, and answers a plain CONNECT with
        # an error instead of a PONG.
        password = password_file(tmp_path, "api").read_text().strip()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        info = json.loads((await reader.readline()).removeprefix(b"INFO "))
        assert info["tls_required"] is True
        writer.write(b'CONNECT {"user":"api","pass":"%s"}\r\nPING\r\n' % password.encode())
        answer = await asyncio.wait_for(reader.read(200), 5)
        writer.close()
        assert b"PONG" not in answer
    finally:
        server.stop()


def test_the_stack_turns_tls_on_when_nats_listens_beyond_loopback(tmp_path: Path) -> None:
    stack = StackNats(tmp_path, free_port(), "0.0.0.0", ["api"], ["a"])
    stack.start(tmp_path / "nats.log")
    try:
        assert stack.url.startswith("tls://127.0.0.1:")
        assert stack.ca_file is not None
        assert (stack.ca_file.parent / "server-key.pem").stat().st_mode & 0o777 == 0o600
        env = stack.env_for(node_user("a"))
        assert env["CORRAL_NATS_CA_FILE"] == str(stack.ca_file)
        assert env["CORRAL_NATS_PASSWORD_FILE"] == str(password_file(tmp_path, node_user("a")))

        async def connect_as_the_node() -> bool:
            bus = await NatsBus.connect(stack.settings_for(node_user("a")))
            connected = bus.nc.is_connected
            await bus.close()
            return connected

        assert asyncio.run(connect_as_the_node())
    finally:
        stack.stop()
    assert StackNats(tmp_path / "again", free_port(), "127.0.0.1", ["api"], []).server.tls is None


def test_the_chart_values_admit_each_service_with_its_own_password(tmp_path: Path) -> None:
    """``corral nats-authorization`` (a Kubernetes cluster's NATS): bcrypt hashes of the
    passwords in the directory, each service's permissions; a second run keeps them."""
    passwords = tmp_path / "nats-passwords"
    values = chart_authorization(passwords, SERVICES)
    users = values["config"]["merge"]["authorization"]["users"]  # type: ignore[index]
    assert [u["user"] for u in users] == [ADMIN, *SERVICES]
    for user in users:
        password = passwords / user["user"]
        assert password.stat().st_mode & 0o777 == 0o600
        assert bcrypt.checkpw(password.read_text().strip().encode(), user["password"].encode())
    api = next(u for u in users if u["user"] == "api")
    assert api["permissions"]["publish"]["allow"] == list(service_permissions("api").publish)
    before = (passwords / "api").read_text()
    chart_authorization(passwords, SERVICES)
    assert (passwords / "api").read_text() == before


@pytest.mark.slow
async def test_only_the_admin_may_make_the_streams(secured: tuple[LocalNats, Path]) -> None:
    """`corral ensure-streams` as the admin works; a service may not change a stream (a
    stolen one cannot shorten the history integrators replay)."""
    server, home = secured
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")},
        "CORRAL_NATS_URL": server.url,
        "CORRAL_NATS_USER": ADMIN,
        "CORRAL_NATS_PASSWORD_FILE": str(password_file(home, ADMIN)),
    }
    command = [sys.executable, "-m", "corral", "ensure-streams"]
    made = await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    assert "streams ready: CORRAL_JOBS" in made.stdout

    async with connected(server, home, "api") as client:
        info = await client.nc.jetstream().stream_info("CORRAL_JOBS")
        shorter = info.config.evolve(max_age=1.0)
        refusal = await client.refused(lambda nc: nc.jetstream(timeout=0.5).update_stream(shorter))
    assert "permissions violation" in refusal


@pytest.mark.slow
async def test_a_node_finds_the_metrics_stream_gone_and_carries_on(secured: tuple[LocalNats, Path]) -> None:
    """After a NATS restart the in-memory metrics stream is gone until the monitor makes
    it again; a node's exporter starting meanwhile may not make it, and must not stop."""
    server, home = secured
    admin = await NatsBus.connect(settings(server, home, ADMIN))
    node = await NatsBus.connect(settings(server, home, node_user("a")))
    try:
        await admin.js.delete_stream("CORRAL_METRICS")
        await node.ensure_streams()  # (warns, does not raise)
        with pytest.raises(nats.js.errors.NotFoundError):
            await node.js.stream_info("CORRAL_METRICS")
        monitor = await NatsBus.connect(settings(server, home, "monitor"))
        await monitor.ensure_streams()  # the monitor may, and does
        await monitor.close()
        assert (await node.js.stream_info("CORRAL_METRICS")).config.name == "CORRAL_METRICS"
    finally:
        await node.close()
        await admin.close()
