"""Who connects to Postgres as whom: the services' roles, their passwords, node secrets.

Each service connects as a role of its own (``SERVICE_ROLES``), granted only what its
SQL uses (migration 0025); a node agent's role, ``corral_agent``, has no table privilege
at all and acts through the ``launcher.node_*`` functions, which check the node's
secret against ``launcher.node_credentials`` (its SHA-256 only is stored). The roles
are made by the migration, without a login: whoever runs the cluster gives them one
(``make up``: ``corral/local/logins.py``, with ``give_login`` and a password file each).

Secrets travel in files only (``read_secret_file``): never in a URL, argv or the
environment, where ``ps`` and every child process could read them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any, Protocol

SERVICE_ROLES: dict[str, str] = {
    "api": "corral_api",
    "scheduler": "corral_scheduler",
    "launcher": "corral_launcher",
    "monitor": "corral_monitor",
    "alerter": "corral_alerter",
    "agent": "corral_agent",
}

# What PostgreSQL's own clients use for a SCRAM verifier (libpq's default).
_SCRAM_ITERATIONS = 4096


class Executor(Protocol):
    """A connection or a ``Database``: whatever runs one statement."""

    async def execute(self, query: str, *args: Any) -> str: ...


class SecretFileProblem(ValueError):
    """A secret's file is missing, empty, or readable by others than its owner."""


def read_secret_file(path: Path) -> str:
    """The secret in ``path`` (its first line), which only its owner may read or write.

    Read where it is needed, each time (a rotated password is picked up at the next
    connection); a file others can read is refused, as ssh refuses such a key."""
    try:
        info = path.stat()
        text = path.read_text()
    except OSError as exc:
        raise SecretFileProblem(f"cannot read the secret file {path}: {exc.strerror}") from exc
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretFileProblem(
            f"the secret file {path} is open to others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"make it its owner's alone: chmod 600 {path}"
        )
    secret = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not secret:
        raise SecretFileProblem(f"the secret file {path} is empty")
    return secret


def write_secret_file(path: Path, secret: str) -> None:
    """Write ``secret`` to ``path``, mode 0600 from its first byte, in a directory only
    its owner may enter (made 0700 if missing)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    path.unlink(missing_ok=True)  # (an existing file keeps its mode through O_CREAT)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        handle.write(secret + "\n")


def sha256_hex(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


async def mint_node_credential(db: Executor, node_id: str) -> str:
    """A new secret for ``node_id`` (its agent's ``CORRAL_AGENT_NODE_SECRET_FILE``); the
    node's earlier secret, if any, stops working at once. Needs the owner's rights."""
    secret = secrets.token_urlsafe(32)
    await db.execute(
        """INSERT INTO launcher.node_credentials (node_id, secret_sha256) VALUES ($1, $2)
           ON CONFLICT (node_id) DO UPDATE
           SET secret_sha256 = EXCLUDED.secret_sha256, created_at = now(), revoked_at = NULL""",
        node_id,
        sha256_hex(secret),
    )
    return secret


async def revoke_node_credential(db: Executor, node_id: str) -> None:
    """The node's secret stops working (a stolen machine); mint a new one to let it back."""
    await db.execute(
        "UPDATE launcher.node_credentials SET revoked_at = now() WHERE node_id = $1 AND revoked_at IS NULL",
        node_id,
    )


def scram_verifier(password: str) -> str:
    """The SCRAM-SHA-256 verifier of ``password`` (RFC 5802, 7677), in the form Postgres
    stores: what ``give_login`` sends, so the password itself never reaches the server
    (nor its log, should the statement fail)."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, _SCRAM_ITERATIONS)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return f"SCRAM-SHA-256${_SCRAM_ITERATIONS}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


_VERIFIER = re.compile(r"^SCRAM-SHA-256\$[0-9]+:[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$")


async def give_login(db: Executor, role: str, password: str) -> None:
    """Let ``role`` (one of ``SERVICE_ROLES``) log in with ``password`` (replacing any
    earlier one). Needs CREATEROLE, or a superuser."""
    if role not in SERVICE_ROLES.values():
        raise ValueError(f"{role!r} is not one of Corral's service roles")
    verifier = scram_verifier(password)
    assert _VERIFIER.match(verifier)  # nothing in it needs quoting
    # (A utility statement takes no parameters: the verifier is quoted in, checked above.)
    await db.execute(f"ALTER ROLE {role} LOGIN PASSWORD '{verifier}'")
