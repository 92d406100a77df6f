"""Admitting a machine as a node, and removing one; read-only bus identities for integrators.

Like ``kubeadm join``: an admin makes a one-time join token (``corral node token``); the
new machine hands it in with the node id it wants (``corral node join``), and gets back
everything its agent and exporter need, once: its own bus identity (a NATS user whose
permissions are its node's alone, shared/bus/identities.py), the database login of node
agents (``corral_agent``, which may only call the node functions) with the node's own
secret (those functions act for that node only), and where the bus and the database are,
with the CA that signed the bus's certificate. The token is spent by that answer.

``corral node remove`` revokes both credentials: NATS disconnects the node's agent and
exporter at once (the stack's NATS follows ``api.bus_credentials``), the node functions
refuse its secret, and its lease runs out, after which its tasks are handled as a lost
node's (the launcher's reconcile loop).

Secrets are stored as hashes only (SHA-256 for tokens and node secrets, bcrypt for bus
passwords, which NATS checks); each is shown once, in the answer that made it.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from services.api.cluster.repository import ClusterRepository
from shared.bus.credentials import new_secret, password_hash
from shared.bus.identities import INTEGRATOR_PREFIX, node_user
from shared.db.credentials import read_secret_file, sha256_hex
from shared.errors import Conflict, NotFound, TransientError, Unauthorized

JOIN_TOKEN_PREFIX = "cjt_"  # noqa: S105  (a prefix, not a secret)


@dataclass(frozen=True)
class JoinConfig:
    """What the control plane tells a joining node (ApiSettings' ``join_*``)."""

    nats_url: str
    nats_ca_file: Path | None
    database_url: str
    agent_password_file: Path | None

    def check(self) -> None:
        if not self.nats_url or not self.database_url or self.agent_password_file is None:
            raise Conflict(
                "this control plane is not set up to admit nodes: its API needs CORRAL_API_JOIN_NATS_URL, "
                "CORRAL_API_JOIN_DATABASE_URL and CORRAL_API_JOIN_AGENT_PASSWORD_FILE (make up sets them)"
            )


def _split(token: str) -> tuple[str, str]:
    body = token.removeprefix(JOIN_TOKEN_PREFIX)
    token_id, _, secret = body.partition(".")
    if not token.startswith(JOIN_TOKEN_PREFIX) or not token_id or not secret:
        raise Unauthorized(
            "that is not a join token (they look like cjt_<id>.<secret>); make one with corral node token"
        )
    return token_id, secret


async def create_join_token(repo: ClusterRepository, created_by: str, ttl: timedelta) -> tuple[str, datetime]:
    token_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(24)
    expires_at = await repo.create_join_token(token_id, sha256_hex(secret), created_by, ttl)
    return f"{JOIN_TOKEN_PREFIX}{token_id}.{secret}", expires_at


async def join(repo: ClusterRepository, token: str, node_id: str, config: JoinConfig) -> dict[str, Any]:
    """Spend ``token`` on ``node_id``: mint its credentials and say where everything is."""
    config.check()
    try:
        agent_password = read_secret_file(config.agent_password_file)  # type: ignore[arg-type]
        ca_pem = config.nats_ca_file.read_text() if config.nats_ca_file else None
    except (OSError, ValueError) as exc:
        raise TransientError(
            f"the control plane cannot read what a node needs ({exc}); see its API's log"
        ) from exc
    token_id, secret = _split(token)
    bus_password = new_secret()
    async with repo.membership() as tx:
        row = await tx.lock_join_token(token_id)
        if row is None or not hmac.compare_digest(row.secret_sha256, sha256_hex(secret)):
            raise Unauthorized("unknown join token; make one with corral node token on the control plane")
        if row.used_at is not None or row.expired:
            raise Unauthorized(
                "this join token was used already or has expired; make a new one with corral node token"
            )
        if await tx.node_is_up(node_id):
            raise Conflict(
                f"node {node_id!r} is up already; pick another id, or remove it first (corral node remove)"
            )
        await tx.spend_join_token(token_id, node_id)
        await tx.grant_node_bus_user(
            node_user(node_id), node_id, password_hash(bus_password), f"join token {token_id}"
        )
        node_secret = await tx.mint_node_secret(node_id)
    return {
        "node_id": node_id,
        "nats": {
            "url": config.nats_url,
            "user": node_user(node_id),
            "password": bus_password,
            "ca_pem": ca_pem,
        },
        "database": {"url": config.database_url, "password": agent_password},
        "node_secret": node_secret,
    }


async def remove(repo: ClusterRepository, node_id: str, removed_by: str) -> None:
    """Revoke the node's bus identity and database secret (see the module doc)."""
    async with repo.membership() as tx:
        if not await tx.node_known(node_id):
            raise NotFound(f"no node {node_id!r}; list them with corral nodes")
        await tx.revoke_node_bus_user(node_user(node_id), node_id, removed_by)
        await tx.revoke_node_secret(node_id)


async def mint_integrator(repo: ClusterRepository, name: str, streams: list[str], created_by: str) -> str:
    """A read-only bus identity for ``streams``; its password, shown once. Minting the
    same name again replaces its password and streams."""
    password = new_secret()
    await repo.grant_integrator(INTEGRATOR_PREFIX + name, streams, password_hash(password), created_by)
    return password


async def revoke_integrator(repo: ClusterRepository, name: str) -> None:
    if not await repo.revoke_integrator(INTEGRATOR_PREFIX + name):
        raise NotFound(f"no integrator {name!r} holds bus credentials")
