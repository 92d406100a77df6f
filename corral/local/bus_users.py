"""The stack's NATS identities: who its private NATS admits, and their passwords.

At each start the supervisor makes a fresh password for the admin (itself and an
operator's tools), each service and each of this machine's nodes, writes each to
``$CORRAL_HOME/credentials/nats-<user>.password`` (0600, in a 0700 directory) and gives
NATS only their bcrypt hashes. A process is told its user and that file
(``CORRAL_NATS_USER``, ``CORRAL_NATS_PASSWORD_FILE``), never the password itself.

Identities minted later (a node that joined, an integrator) live in Postgres,
``api.bus_credentials``, as bcrypt hashes; ``MintedUsersWatcher`` renders them into NATS's
configuration as they are added and revoked, and NATS reloads it (a revoked identity is
disconnected at once), like the config reloader beside NATS on Kubernetes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from corral.local.nats import NatsUser, user_entry
from shared.bus.credentials import new_secret, password_hash
from shared.bus.identities import (
    ADMIN,
    ADMIN_PERMISSIONS,
    INTEGRATOR_PREFIX,
    integrator_permissions,
    node_permissions,
    node_user,
    service_permissions,
)

log = logging.getLogger(__name__)


def credentials_dir(home: Path) -> Path:
    directory = home / "credentials"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)
    return directory


def write_secret(path: Path, secret: str) -> Path:
    """Write ``secret`` to ``path``, readable by its owner only, from the first byte."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")
    return path


def password_file(home: Path, user: str) -> Path:
    return home / "credentials" / f"nats-{user}.password"


def stack_users(home: Path, services: Iterable[str], node_ids: Iterable[str]) -> list[NatsUser]:
    """The admin, ``services`` and ``node_ids`` of this stack, each with a fresh password
    written to its ``password_file``."""
    credentials_dir(home)
    wanted = [(ADMIN, ADMIN_PERMISSIONS)]
    wanted += [(service, service_permissions(service)) for service in services]
    wanted += [(node_user(node), node_permissions(node)) for node in node_ids]
    users = []
    for user, permissions in wanted:
        secret = new_secret()
        write_secret(password_file(home, user), secret)
        users.append(NatsUser(user, password_hash(secret), permissions))
    return users


def chart_authorization(password_dir: Path, services: Iterable[str]) -> dict[str, object]:
    """Values for NATS's official chart (``config.merge``) admitting the admin and each of
    ``services`` with its permissions, from the passwords in ``password_dir`` (one file
    per user, made 0600 where missing): what each service's Secret then holds."""
    password_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    wanted = [(ADMIN, ADMIN_PERMISSIONS), *((service, service_permissions(service)) for service in services)]
    users = []
    for user, permissions in wanted:
        path = password_dir / user
        if not path.exists():
            write_secret(path, new_secret())
        users.append(NatsUser(user, password_hash(path.read_text().strip()), permissions))
    return {"config": {"merge": {"authorization": {"users": [user_entry(u) for u in users]}}}}


MINTED = """
    SELECT user_name, kind, node_id, streams, password_hash, revoked_at IS NOT NULL AS revoked
    FROM api.bus_credentials ORDER BY user_name"""


@dataclass(frozen=True)
class MintedUsers:
    """What Postgres says on top of the stack's own users: identities minted since (a
    node that joined, an integrator), and those revoked (a node removed: its own or one
    of this stack's, whose static user then goes too)."""

    active: tuple[NatsUser, ...] = ()
    revoked: frozenset[str] = frozenset()

    def applied_to(self, static: Iterable[NatsUser]) -> list[NatsUser]:
        replaced = self.revoked | {u.name for u in self.active}
        return [u for u in static if u.name not in replaced] + list(self.active)


def minted_user(row: asyncpg.Record) -> NatsUser:
    if row["kind"] == "node":
        permissions = node_permissions(row["node_id"])
    else:
        permissions = integrator_permissions(row["user_name"].removeprefix(INTEGRATOR_PREFIX), row["streams"])
    return NatsUser(row["user_name"], row["password_hash"], permissions)


async def fetch_minted(database_url: str) -> MintedUsers:
    conn = await asyncpg.connect(database_url, timeout=5)
    try:
        rows = await conn.fetch(MINTED)
    finally:
        await conn.close()
    return MintedUsers(
        active=tuple(minted_user(row) for row in rows if not row["revoked"]),
        revoked=frozenset(row["user_name"] for row in rows if row["revoked"]),
    )


class MintedUsersWatcher(threading.Thread):
    """Polls ``api.bus_credentials`` and calls ``changed`` whenever it differs from the
    last look (the first look included)."""

    def __init__(self, database_url: str, changed: Callable[[MintedUsers], None], interval_s: float = 1.0):
        super().__init__(name="minted-nats-users", daemon=True)
        self._database_url = database_url
        self._changed = changed
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._last: MintedUsers | None = None

    def look_once(self) -> None:
        try:
            minted = asyncio.run(fetch_minted(self._database_url))
        # (Postgres down or restarting: the supervisor brings it back; keep looking.)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            log.warning("could not read the minted NATS credentials (%s); keeping the last", exc)
            return
        if minted != self._last:
            self._last = minted
            self._changed(minted)

    def run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.look_once()

    def stop(self) -> None:
        self._stop.set()
