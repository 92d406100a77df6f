"""The database logins of a ``make up`` stack: one role per service, a secret per node.

On the stack's own Postgres the supervisor migrates once, as the cluster's owner, then
gives each service's role (``shared/db/credentials.SERVICE_ROLES``, made by the
migrations without a login) a login and a fresh random password, written to
``$CORRAL_HOME/credentials/postgres-<service>`` (0600, in a 0700 directory), and mints
each local node's secret into ``$CORRAL_HOME/credentials/node-<node>.secret``. Each
service then connects as its own role, its password read from its file
(``CORRAL_DATABASE_PASSWORD_FILE``): no password in a URL, argv or the environment; and
none of them migrates (``CORRAL_DATABASE_MIGRATE_ON_START=false``): only the owner may.
The cluster authenticates every connection, socket or TCP, with SCRAM
(``postgres.py``: ``initdb --auth=scram-sha-256``), so a role's password is what lets
it in. Every ``make up`` gives every role a new password.

With ``CORRAL_DATABASE_URL`` (a server of the operator's) the services connect as that
URL says, as before: there the operator gives the roles their logins (README, "Security
model").
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from corral.local.postgres import LocalPostgres
from corral.local.problems import StartupProblem
from shared.db.credentials import SERVICE_ROLES, give_login, mint_node_credential, write_secret_file
from shared.db.migrations import apply_migrations
from shared.db.pool import connect
from shared.settings import DatabaseSettings

STEP = "Postgres logins"


def credentials_dir(home: Path) -> Path:
    return home / "credentials"


def password_file(home: Path, service: str) -> Path:
    return credentials_dir(home) / f"postgres-{service}"


def node_secret_file(home: Path, node_id: str) -> Path:
    return credentials_dir(home) / f"node-{node_id}.secret"


@dataclass
class StackLogins:
    """Who each process of the stack connects to Postgres as."""

    home: Path
    # The URL of the stack's database for a role (no password in it).
    urls: dict[str, str] = field(default_factory=dict)

    def env_for(self, service: str, node_id: str) -> dict[str, str]:
        """The process's database settings: its role's URL and password file (none for a
        service without a database: the exporter)."""
        if service not in self.urls:
            return {}
        env = {
            "CORRAL_DATABASE_URL": self.urls[service],
            "CORRAL_DATABASE_PASSWORD_FILE": str(password_file(self.home, service)),
            "CORRAL_DATABASE_MIGRATE_ON_START": "false",
        }
        if service == "agent":
            env["CORRAL_AGENT_NODE_SECRET_FILE"] = str(node_secret_file(self.home, node_id))
        return env


def prepare_logins(
    postgres: LocalPostgres, home: Path, services: Iterable[str], node_ids: Iterable[str]
) -> StackLogins:
    """Migrate as the owner, then give each of ``services`` that uses the database a
    login and a password file, and each of ``node_ids`` a secret. What to give the
    processes."""
    wanted = [service for service in services if service in SERVICE_ROLES]
    nodes = list(node_ids)

    async def prepare() -> None:
        db = await connect(DatabaseSettings(url=postgres.local_url(), pool_min_size=1, pool_max_size=1))
        try:
            await apply_migrations(db)
            for service in wanted:
                password = secrets.token_urlsafe(32)
                await give_login(db, SERVICE_ROLES[service], password)
                write_secret_file(password_file(home, service), password)
            if "agent" in wanted:
                for node_id in nodes:
                    write_secret_file(
                        node_secret_file(home, node_id), await mint_node_credential(db, node_id)
                    )
        finally:
            await db.close()

    try:
        asyncio.run(prepare())
    except OSError as exc:
        raise StartupProblem(
            STEP,
            f"the services' credentials could not be written to {credentials_dir(home)} ({exc.strerror})",
            "make sure CORRAL_HOME is yours to write",
        ) from exc
    return StackLogins(home, {service: postgres.local_url(user=SERVICE_ROLES[service]) for service in wanted})
