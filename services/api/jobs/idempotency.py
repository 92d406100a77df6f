"""``Idempotency-Key`` on submit: a retried request creates its job once.

A client that did not hear the answer to a submit (a timeout, a dropped connection)
sends it again with the same ``Idempotency-Key`` header and gets the job the first one
created — the same id, answered ``201`` again (as the first time, so a client needs no
second code path), with ``Idempotent-Replayed: true`` and the job as it is *now*. The
same key with a different request is a 422 (``idempotency-key-reused``): the key was
meant for something else, and guessing which request the client meant would be worse.

Keys are per user (two users' "1" never meet) and kept ``retention_s`` (a day by
default, ``CORRAL_API_IDEMPOTENCY_RETENTION_S``): after that a key may be used afresh.

The request is compared by a SHA-256 of its *parsed* document in canonical JSON, so
the same job sent as JSON or YAML, or with other whitespace, is the same request. Only
the digest is stored: an OpenPAI request holds secrets.

Concurrency: the key row is claimed in the submit's transaction *before* the job row is
written (``JobWrites.claim_idempotency_key``), so two concurrent requests with one key serialise
on it: the second waits for the first to commit, then finds its job. The row and the job
commit together, so a key never points at a job that was not stored, and a refused
submit (403, 422) leaves the key unused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from services.api.jobs.repository import JobRepository, JobWrites
from shared.aio import raise_if_cancelling
from shared.db.pool import DATABASE_ERRORS
from shared.errors import InvalidInput

log = logging.getLogger(__name__)
HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
# Printable ASCII without spaces: UUIDs, ULIDs, "retry-3"... but nothing a log could choke on.
_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


class IdempotencyKeyReused(InvalidInput):
    problem_type = "idempotency-key-reused"
    title = "Idempotency key reused"


def request_digest(document: Any) -> str:
    """SHA-256 of the parsed request in canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_key(key: str) -> str:
    if not _KEY_RE.match(key):
        raise InvalidInput(
            f"the {HEADER} header must be 1 to 255 printable ASCII characters without spaces"
            " (a UUID is a good choice)"
        )
    return key


@dataclass(frozen=True)
class IdempotencyKey:
    key: str
    digest: str
    retention_s: float

    async def claim(self, tx: JobWrites, username: str, job_id: str) -> str | None:
        """Claim the key for ``job_id`` (about to be inserted in ``tx``); or return the
        job an earlier request with this key created. Raises ``IdempotencyKeyReused``
        when that request was a different one."""
        if await tx.claim_idempotency_key(username, self.key, self.digest, job_id, self.retention_s):
            return None
        earlier = await tx.idempotency_key(username, self.key)
        assert earlier is not None  # the conflicting row is committed (we waited for it)
        if earlier.request_sha256 != self.digest:
            raise IdempotencyKeyReused(
                f"the {HEADER} {self.key!r} was used for a different request (job {earlier.job_id});"
                f" a key stands for one request for {self.retention_s / 3600:g} h. Send that request"
                " unchanged to get its job, or use a new key for a new job"
            )
        return earlier.job_id

    async def sweep(self, repo: JobRepository) -> None:
        """Forget a batch of expired keys (every keyed submit does a little of this).

        It runs after the submit has committed, so a sweep Postgres refuses (restarting,
        its disk full) is left to the next keyed submit: the answer must still be the
        job, not a 503 saying nothing was stored."""
        try:
            await repo.sweep_idempotency_keys(self.retention_s)
        except DATABASE_ERRORS as exc:
            raise_if_cancelling()
            log.warning("could not forget expired idempotency keys (%s); the next keyed submit will", exc)
