"""The bus over NATS JetStream (nats-py).

Streams are created or updated to match ``streams.py`` at start (idempotent). Publishes
carry ``Nats-Msg-Id`` so JetStream drops duplicates inside its window. Consumers are
durable pull consumers with explicit acks; the client reconnects forever, so a NATS
restart pauses the bus instead of killing the service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from shared.aio import raise_if_cancelling
from shared.bus.identities import inbox_prefix
from shared.bus.protocol import ConsumerConfig, Delivery, Subscription
from shared.bus.streams import STREAMS, StreamSpec
from shared.db.credentials import SecretFileProblem, read_secret_file
from shared.errors import TransientError
from shared.settings import NatsSettings

log = logging.getLogger(__name__)


AUTH_RETRY_MAX_S = 30.0
# JetStream's answer to a consumer update that changes what may not change (its start).
CONSUMER_NOT_UPDATABLE = 10012


def refused_credentials(exc: BaseException | None) -> bool:
    """Whether NATS refused this identity (wrong, expired or revoked credentials)."""
    text = str(exc).lower()
    return "authorization violation" in text or "authentication" in text


def _credentials_hint(settings: NatsSettings) -> str:
    if not settings.user:
        return "this process has no NATS credentials: set CORRAL_NATS_USER and CORRAL_NATS_PASSWORD_FILE"
    return (
        f"NATS refused user {settings.user!r}: its password (CORRAL_NATS_PASSWORD_FILE="
        f"{settings.password_file}) is wrong, or the identity was revoked (corral node remove)"
    )


class _ConnectionLog:
    """nats-py's error callback: one line per problem (it logs each failed (re)connect
    with a traceback), and a refusal of our credentials said as such, once per minute
    while the client keeps trying."""

    def __init__(self, settings: NatsSettings) -> None:
        self._settings = settings
        self.refused = False  # the server refused our credentials at least once
        self.last: Exception | None = None
        self._refusal_logged_at = -math.inf

    async def report(self, exc: Exception) -> None:
        self.last = exc
        if "permissions violation" in str(exc).lower():
            # Not a connection problem: this identity tried what it may not (a missing
            # permission in shared/bus/identities.py, or a compromised process).
            log.error("NATS refused user %r: %s", self._settings.user, exc)
            return
        if not refused_credentials(exc):
            log.warning("NATS connection problem: %r", exc)
            return
        self.refused = True
        now = time.monotonic()
        if now - self._refusal_logged_at >= 60:
            self._refusal_logged_at = now
            log.error("%s; retrying", _credentials_hint(self._settings))


def _password(settings: NatsSettings) -> str | None:
    """The password in its file, which only its owner may read (as for Postgres's)."""
    if settings.password_file is None:
        return None
    try:
        return read_secret_file(settings.password_file)
    except SecretFileProblem as exc:
        raise TransientError(
            f"cannot read the NATS password file: {exc}; fix CORRAL_NATS_PASSWORD_FILE"
        ) from exc


def _tls(settings: NatsSettings) -> ssl.SSLContext | None:
    if settings.ca_file is None and not settings.url.startswith("tls://"):
        return None
    return ssl.create_default_context(cafile=str(settings.ca_file) if settings.ca_file else None)


class NatsDelivery:
    def __init__(self, msg: Msg) -> None:
        self._msg = msg

    @property
    def subject(self) -> str:
        return self._msg.subject

    @property
    def data(self) -> bytes:
        return self._msg.data

    @property
    def headers(self) -> dict[str, str]:
        return dict(self._msg.headers or {})

    @property
    def num_delivered(self) -> int:
        return int(self._msg.metadata.num_delivered or 1)

    @property
    def stream_seq(self) -> int | None:
        return self._msg.metadata.sequence.stream

    async def ack(self) -> None:
        await self._msg.ack()

    async def nak(self, delay_s: float) -> None:
        await self._msg.nak(delay=delay_s)

    async def term(self) -> None:
        await self._msg.term()


class NatsSubscription:
    """A durable pull consumer that asks for as many messages as it knows are waiting.

    ``fetch(batch)`` asks JetStream for ``min(batch, backlog)`` messages, where the
    backlog is what the last message delivered said was still pending behind it (its
    ``num_pending``); with none known, one. Asking for more than are waiting stalls
    an idle consumer: nats-py (2.16) sends a batch request that the server keeps open,
    returns once a first message came, and leaves the request behind; the server gives
    the next message to that older request, and the next fetch, having got it, waits
    for the rest of its own batch until the old request expires (a whole fetch timeout,
    so a job's start takes most of a second instead of milliseconds). A
    request for what is already there is filled at once, and a batch of one returns on
    its first message whatever request it came through. With ``sharers`` processes
    pulling from one durable, the backlog a message tells of is theirs together: each
    asks for its share of it (rounded down), so the others' share taken meanwhile leaves
    no request open behind it.
    """

    def __init__(self, sub: JetStreamContext.PullSubscription, sharers: int = 1) -> None:
        self._sub = sub
        self._sharers = sharers
        self._backlog = 0

    async def fetch(self, batch: int, timeout_s: float) -> Sequence[Delivery]:
        try:
            wanted = max(1, min(batch, self._backlog // self._sharers))
            msgs = await self._sub.fetch(wanted, timeout=timeout_s)
        except (nats.errors.TimeoutError, TimeoutError):
            # nats-py can turn our own cancellation into a TimeoutError; never swallow
            # a cancel, or a TaskGroup shutting down would wait on this task forever.
            raise_if_cancelling()
            self._backlog = 0
            return []  # nothing arrived within the timeout: the normal idle case
        except nats.errors.Error as exc:
            # NATS restarting, JetStream unavailable, connection closed: the consumer loop
            # waits and fetches again rather than dying.
            self._backlog = 0
            raise ConnectionError(f"fetch failed: {exc!r}") from exc
        self._backlog = int(msgs[-1].metadata.num_pending or 0) if msgs else 0
        return [NatsDelivery(msg) for msg in msgs]


YIELD_EVERY = 100  # listener messages handled between two turns of the event loop


class NatsBus:
    def __init__(self, nc: Client, settings: NatsSettings, name: str = "corral") -> None:
        self.nc = nc
        self.name = name
        self.js = nc.jetstream()
        self._settings = settings

    @classmethod
    async def connect(cls, settings: NatsSettings, *, name: str = "corral") -> NatsBus:
        """Connect as ``settings.user``. A server that cannot be reached raises
        ``TransientError`` (the service's supervisor retries); a server that refuses our
        credentials is said so in the log and tried again, backing off to
        ``AUTH_RETRY_MAX_S``, re-reading the password file each time."""
        delay = 1.0
        while True:
            errors = _ConnectionLog(settings)
            try:
                return cls(await cls._connect_once(settings, name, errors), settings, name)
            except TransientError as exc:
                if not (errors.refused or refused_credentials(exc.__cause__)):
                    raise
            log.error("%s; trying again in %.0f s", _credentials_hint(settings), delay)
            await asyncio.sleep(delay)
            delay = min(AUTH_RETRY_MAX_S, delay * 2)

    @staticmethod
    async def _connect_once(settings: NatsSettings, name: str, errors: _ConnectionLog) -> Client:
        # nats-py retries the *first* connection forever when reconnects are unlimited;
        # bound it, so a service with no NATS fails visibly and its supervisor retries.
        user = settings.user or None
        nc = Client()
        try:
            await asyncio.wait_for(
                nc.connect(
                    settings.url,
                    name=name,
                    user=user,
                    password=_password(settings) if user else None,
                    inbox_prefix=inbox_prefix(user) if user else "_INBOX",
                    tls=_tls(settings),
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.5,  # type: ignore[arg-type]  # (a float works: it is slept)
                    connect_timeout=2,
                    allow_reconnect=True,
                    error_cb=errors.report,
                ),
                settings.connect_timeout_s,
            )
        except BaseException as exc:
            with contextlib.suppress(Exception):  # (its sockets, and its reconnecting task)
                await asyncio.wait_for(nc.close(), 2)
            if isinstance(exc, OSError | TimeoutError | nats.errors.Error):
                # A timeout hides why each try failed (a TLS certificate not trusted, a
                # refused port): say the last reason the client gave.
                why = errors.last if isinstance(exc, TimeoutError) and errors.last else exc
                raise TransientError(f"cannot reach NATS at {settings.url}: {why!r}") from exc
            raise
        return nc

    async def ensure_streams(self) -> None:
        for spec in STREAMS:
            try:
                await self._ensure_stream(spec)
            except nats.errors.TimeoutError:
                if not spec.in_memory:
                    raise
                # The in-memory metrics stream is gone after a NATS restart until its
                # reader (the monitor) makes it again, and an identity that may not make
                # streams (a node's exporter) gets no answer: its heartbeats still reach
                # the monitor on core NATS meanwhile, so this is no reason to stop.
                log.warning(
                    "stream %s is missing and this identity may not make it; the monitor will", spec.name
                )

    async def _ensure_stream(self, spec: StreamSpec) -> None:
        config = api.StreamConfig(
            name=spec.name,
            subjects=list(spec.subjects),
            retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.MEMORY if spec.in_memory else api.StorageType.FILE,
            max_age=spec.max_age_s,
            max_bytes=spec.max_bytes,
            discard=api.DiscardPolicy.NEW if spec.discard_new else api.DiscardPolicy.OLD,
            num_replicas=self._settings.stream_replicas,
            duplicate_window=self._settings.duplicate_window_s,
        )
        try:
            info = await self.js.stream_info(spec.name)
            if _same_stream(info.config, config):
                # As it should be: nothing to change, and nothing an identity without
                # the right to manage streams (every service but the monitor's metrics,
                # shared/bus/identities.py) would be refused.
                return
        except nats.js.errors.NotFoundError:
            try:
                await self.js.add_stream(config)
                return
            except nats.js.errors.BadRequestError:
                pass  # created by a service starting at the same moment; update below
        try:
            await self.js.update_stream(config)
        except nats.js.errors.BadRequestError:
            if not spec.in_memory:
                raise
            # e.g. a storage type changed by an upgrade: a metrics stream is disposable.
            await self.js.delete_stream(spec.name)
            await self.js.add_stream(config)

    async def publish(
        self, subject: str, payload: bytes, *, msg_id: str, headers: dict[str, str] | None = None
    ) -> None:
        all_headers = {**(headers or {}), "Nats-Msg-Id": msg_id}
        await self.js.publish(subject, payload, timeout=5.0, headers=all_headers)

    async def subscribe(self, config: ConsumerConfig) -> Subscription:
        # One filter: named, so the filter is part of the subject that creates the
        # consumer, which NATS holds to it (a node may create only its own; see
        # shared/bus/identities.py).
        single = config.filter_subjects[0] if len(config.filter_subjects) == 1 else None
        consumer = api.ConsumerConfig(
            name=config.durable,
            durable_name=config.durable,
            filter_subject=single,
            filter_subjects=None if single else list(config.filter_subjects),
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=config.ack_wait_s,
            # Unlimited at the server: retryable failures (TransientError, database away)
            # must not use up deliveries and be dropped silently. ``max_deliver`` is
            # enforced by the consumer loop, which dead-letters instead of dropping.
            max_deliver=-1,
            deliver_policy=_deliver_policy(config),
            opt_start_time=None if config.deliver_all else config.start_time,
            max_ack_pending=10_000,
        )
        try:
            await self.js.add_consumer(config.stream, consumer)
        except nats.js.errors.APIError as exc:
            if exc.err_code != CONSUMER_NOT_UPDATABLE:
                raise
            # The durable exists from another starting point (the webhook fan-in makes it
            # anew from a time, then a restarted API asks for it at "new"). Where a durable
            # starts is fixed when it is made, and NATS refuses to change it: it goes on
            # from where it is, as on the in-memory bus, with the rest of the config applied.
            existing = (await self.js.consumer_info(config.stream, config.durable)).config
            if (existing.deliver_policy, existing.opt_start_time) == (
                consumer.deliver_policy,
                consumer.opt_start_time,
            ):
                raise  # something else that cannot be changed: not ours to paper over
            consumer.deliver_policy = existing.deliver_policy
            consumer.opt_start_time = existing.opt_start_time
            await self.js.add_consumer(config.stream, consumer)
        sub = await self.js.pull_subscribe_bind(config.durable, stream=config.stream)
        return NatsSubscription(sub, config.sharers)

    async def delete_consumer(self, stream: str, durable: str) -> None:
        try:
            await self.js.delete_consumer(stream, durable)
        except nats.js.errors.NotFoundError:
            return
        except nats.errors.Error as exc:
            raise ConnectionError(f"could not delete consumer {durable}: {exc!r}") from exc

    async def listen(self, subject: str, queue: str, handle: Callable[[bytes], None]) -> None:
        """Hand every message on ``subject`` to ``handle``, sharing them with every other
        listener of the same ``queue`` (a core-NATS queue group); runs until cancelled.

        For metrics only: no acks, no redelivery — a listener that is down or too slow
        misses messages (the next heartbeat replaces a lost one). Lifecycle events go
        through ``subscribe`` and its durable, acknowledged consumers instead.
        """

        delivered = 0

        async def deliver(msg: Msg) -> None:
            nonlocal delivered
            handle(msg.data)
            delivered += 1
            # nats-py calls us back-to-back while messages are queued, without ever
            # suspending: under a backlog that starves every other task of the process,
            # the socket reader included, until the server cuts us off as a slow consumer.
            if delivered % YIELD_EVERY == 0:
                await asyncio.sleep(0)

        # A connection of its own: a flood of metrics must not queue the JetStream acks
        # and lifecycle deliveries of the main connection behind it (and if the server
        # cuts a slow listener off, only this connection goes, and it reconnects).
        listener = await NatsBus.connect(self._settings, name=f"{self.name}-{queue}-listener")
        try:
            await listener.nc.subscribe(
                subject,
                queue=queue,
                cb=deliver,
                pending_msgs_limit=200_000,
                pending_bytes_limit=512 * 1024 * 1024,
            )
            await asyncio.Event().wait()
        finally:
            await listener.close()

    async def watch(self, subjects: Sequence[str], passed: Callable[[], None]) -> None:
        """Call ``passed`` each time a message on one of ``subjects`` goes by; runs until
        cancelled. A plain core-NATS subscription: what JetStream stores is published on
        the same subjects, so it sees the events too, with no consumer on the server, no
        fetch and no ack per message.

        For a reader that takes the truth from Postgres and only needs to know *when* to
        look again (the scheduler's cycle): nothing is redelivered or replayed, so a
        message missed while disconnected or lagging must be made up for by the reader's
        own periodic look.
        """

        async def on_message(_: Msg) -> None:
            passed()

        subscriptions = [await self.nc.subscribe(subject, cb=on_message) for subject in subjects]
        try:
            await asyncio.Event().wait()
        finally:
            for subscription in subscriptions:
                with contextlib.suppress(Exception):  # the connection may be closing already
                    await subscription.unsubscribe()

    async def request(self, subject: str, payload: bytes, timeout_s: float) -> bytes:
        """Ask whoever answers ``subject`` (core NATS request/reply) and return the answer.
        Raises ``TimeoutError`` when nobody answers in time (nobody listening included)."""
        try:
            reply = await self.nc.request(subject, payload, timeout=timeout_s)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise TimeoutError(f"no answer on {subject} in {timeout_s} s") from exc
        except nats.errors.Error as exc:  # the connection closed or reconnecting: no answer either
            raise TimeoutError(f"could not ask on {subject}: {exc!r}") from exc
        return reply.data

    async def answer(self, subject: str, queue: str, handle: Callable[[bytes], Awaitable[bytes]]) -> None:
        """Answer every request on ``subject`` with ``handle``'s bytes, sharing requests with
        the other members of ``queue``; runs until cancelled. For questions, not events:
        a request nobody answers times out at the asker, nothing is redelivered."""

        async def reply(msg: Msg) -> None:
            await msg.respond(await handle(msg.data))

        subscription = await self.nc.subscribe(subject, queue=queue, cb=reply)
        try:
            await asyncio.Event().wait()
        finally:
            with contextlib.suppress(Exception):  # the connection may be closing already
                await subscription.unsubscribe()

    async def close(self) -> None:
        # close, not drain: publishes were already acknowledged one by one, and an
        # unacknowledged delivery is simply redelivered; drain would wait out its
        # 30 s timeout on the cancelled pull requests of our consumers.
        if not self.nc.is_closed:
            await self.nc.close()


def _same_stream(have: api.StreamConfig, want: api.StreamConfig) -> bool:
    fields = ("retention", "storage", "max_age", "max_bytes", "discard", "num_replicas", "duplicate_window")
    return sorted(have.subjects or []) == sorted(want.subjects or []) and all(
        getattr(have, f) == getattr(want, f) for f in fields
    )


def _deliver_policy(config: ConsumerConfig) -> api.DeliverPolicy:
    if config.deliver_all:
        return api.DeliverPolicy.ALL
    return api.DeliverPolicy.NEW if config.start_time is None else api.DeliverPolicy.BY_START_TIME
