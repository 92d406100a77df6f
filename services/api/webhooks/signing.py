"""Standard Webhooks signatures (https://www.standardwebhooks.com/).

Every delivery carries three headers: ``webhook-id`` (the event's id: the same on every
retry and redelivery, so a receiver deduplicates on it), ``webhook-timestamp`` (Unix
seconds when this attempt was sent; receivers refuse old ones, which stops replays) and
``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``, once per
secret in force, separated by spaces. After a rotation the old secret signs beside the
new one for a while, so a receiver may switch at its own pace.

A secret is ``whsec_`` and 32 random bytes in base64; the key is the decoded bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"  # noqa: S105  # the spec's prefix, not a secret


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def signature(secrets_in_force: list[str], msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(_key(s), signed, hashlib.sha256).digest()).decode()
        for s in secrets_in_force
    )


def signed_headers(secrets_in_force: list[str], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secrets_in_force, msg_id, timestamp, body),
        "user-agent": "Corral-Webhooks/1",
    }
