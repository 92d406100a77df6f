"""The stack's own NATS: started with its identities, streams made, minted users followed.

``make up`` runs NATS with authentication always (``bus_users``: a fresh password per
service, node and the admin), and with TLS whenever it listens beyond loopback
(``CORRAL_NATS_HOST``; a private CA in ``$CORRAL_HOME/tls``, ``tls.py``, which the
stack's Postgres shares when it listens beyond loopback too). It makes
the streams itself, as the admin, before any service starts: services may only look at
them (the monitor may also remake the in-memory metrics stream).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Iterable
from pathlib import Path

from corral.local.bus_users import MintedUsers, MintedUsersWatcher, password_file, stack_users
from corral.local.jetstream_probe import JetStreamProbe
from corral.local.nats import LocalNats
from corral.local.problems import StartupProblem
from corral.local.server_logs import NATS_FATAL, last_line_saying, log_since, log_size
from corral.local.tls import server_tls
from shared.bus.identities import ADMIN
from shared.bus.nats import NatsBus
from shared.settings import NatsSettings

# Events are notifications: every job is in Postgres, and each service catches up from it.
_STORE_FIX = (
    "move it aside (mv {store} {store}.damaged) and start again: the streams are made anew, and no "
    "job is lost (Postgres holds them all); integrators' durable consumers start over"
)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class StackNats:
    def __init__(self, home: Path, port: int, host: str, services: Iterable[str], node_ids: Iterable[str]):
        self.home = home
        self._users = stack_users(home, services, node_ids)
        tls = None if is_loopback(host) else server_tls(home / "tls", host)
        self.server = LocalNats(home / "nats", port, host=host, users=list(self._users), tls=tls)
        self._watcher: MintedUsersWatcher | None = None
        self._probe: JetStreamProbe | None = None
        self.log_file: Path | None = None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def ca_file(self) -> Path | None:
        return None if self.server.tls is None else self.server.tls.ca_file

    def settings_for(self, user: str) -> NatsSettings:
        return NatsSettings(
            url=self.url, user=user, password_file=password_file(self.home, user), ca_file=self.ca_file
        )

    def env_for(self, user: str) -> dict[str, str]:
        """What a process of this stack is told to connect as ``user``."""
        env = {
            "CORRAL_NATS_URL": self.url,
            "CORRAL_NATS_USER": user,
            "CORRAL_NATS_PASSWORD_FILE": str(password_file(self.home, user)),
        }
        if self.ca_file is not None:
            env["CORRAL_NATS_CA_FILE"] = str(self.ca_file)
        return env

    def start(self, log_file: Path) -> None:
        """Start it, refuse a store it cannot use (``server_logs.py``), make the streams."""
        self.log_file = log_file
        offset = log_size(log_file)
        try:
            self.server.start(log_file=log_file)
        except (OSError, RuntimeError) as exc:
            said = last_line_saying(log_since(log_file, offset), NATS_FATAL)
            raise StartupProblem(
                "NATS",
                f"nats-server could not start with its JetStream store {self.store}: {said or exc}",
                f"see its log, {log_file}; if it refuses the store, {_STORE_FIX.format(store=self.store)}",
            ) from exc
        try:
            asyncio.run(self._ensure_streams())
        except StartupProblem:
            self.server.stop()
            raise
        # For an operator's tools and tests: where the stack's NATS is, and how to reach
        # it as the admin (with the admin password file beside the others).
        (self.home / "run").mkdir(parents=True, exist_ok=True)
        (self.home / "run" / "nats-url").write_text(self.url + "\n")

    def start_again(self) -> None:
        """After a crash: the same store (streams and consumers are on disk), the users
        admitted now, the in-memory metrics stream made anew."""
        assert self.log_file is not None, "started once before"
        self.start(self.log_file)

    @property
    def store(self) -> Path:
        return self.server.directory / "jetstream"

    def _streams_on_disk(self) -> set[str]:
        # Users of the configuration file share NATS' global account, "$G".
        streams = self.store / "$G" / "streams"
        return {path.name for path in streams.iterdir() if path.is_dir()} if streams.is_dir() else set()

    async def _ensure_streams(self) -> None:
        bus = await NatsBus.connect(self.settings_for(ADMIN), name="corral-supervisor")
        try:
            # NATS skips a stream whose files it cannot read (a warning in its log) and
            # starts without it; making it anew would silently put an empty stream over
            # what is on disk.
            loaded = {info.config.name for info in await bus.js.streams_info()}
            dropped = sorted(self._streams_on_disk() - loaded)
            if dropped:
                where = self.store / "$G" / "streams" / dropped[0]
                raise StartupProblem(
                    "NATS",
                    f"nats-server did not load the stream {dropped[0]} from {where} (its log, "
                    f"{self.log_file}, says why), and Corral will not make it anew over it",
                    _STORE_FIX.format(store=self.store),
                )
            await bus.ensure_streams()
        finally:
            await bus.close()

    def follow_minted(self, database_url: str) -> None:
        """Admit the identities minted in Postgres too, as they come and go."""
        self._watcher = MintedUsersWatcher(database_url, self._admit)
        self._watcher.look_once()
        self._watcher.start()

    def watch_store(self, stuck: Callable[[str], None]) -> None:
        """Probe that JetStream still stores messages (``jetstream_probe.py``); ``stuck``
        is told when it no longer does."""
        admin = self.settings_for(ADMIN)
        self._probe = JetStreamProbe(lambda: admin, self.server.directory, self._serving, stuck)
        self._probe.start()

    def _serving(self) -> bool:
        process = self.server.process
        return process is not None and process.returncode is None

    def _admit(self, minted: MintedUsers) -> None:
        self.server.reload(minted.applied_to(self._users))

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.stop()
        if self._watcher is not None:
            self._watcher.stop()
        self.server.stop()
