"""Passwords of bus identities: made random, kept as bcrypt hashes (NATS checks those).

The passwords are 256-bit random tokens, so the hash need not slow a guess down
(``BCRYPT_ROUNDS`` is low: NATS checks it on every connection); it keeps the password
itself out of the server's configuration and out of Postgres.
"""

from __future__ import annotations

import secrets

import bcrypt

BCRYPT_ROUNDS = 6


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def password_hash(secret: str) -> str:
    return bcrypt.hashpw(secret.encode(), bcrypt.gensalt(rounds=BCRYPT_ROUNDS)).decode()
