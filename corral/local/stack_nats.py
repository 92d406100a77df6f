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
from collections.abc import Iterable
from pathlib import Path

from corral.local.bus_users import MintedUsers, MintedUsersWatcher, password_file, stack_users
from corral.local.nats import LocalNats
from corral.local.tls import server_tls
from shared.bus.identities import ADMIN
from shared.bus.nats import NatsBus
from shared.settings import NatsSettings


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
        self.server.start(log_file=log_file)
        asyncio.run(self._ensure_streams())
        # For an operator's tools and tests: where the stack's NATS is, and how to reach
        # it as the admin (with the admin password file beside the others).
        (self.home / "run").mkdir(parents=True, exist_ok=True)
        (self.home / "run" / "nats-url").write_text(self.url + "\n")

    async def _ensure_streams(self) -> None:
        bus = await NatsBus.connect(self.settings_for(ADMIN), name="corral-supervisor")
        try:
            await bus.ensure_streams()
        finally:
            await bus.close()

    def follow_minted(self, database_url: str) -> None:
        """Admit the identities minted in Postgres too, as they come and go."""
        self._watcher = MintedUsersWatcher(database_url, self._admit)
        self._watcher.look_once()
        self._watcher.start()

    def _admit(self, minted: MintedUsers) -> None:
        self.server.reload(minted.applied_to(self._users))

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        self.server.stop()
