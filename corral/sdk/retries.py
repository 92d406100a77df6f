"""When a call is sent again, and how long to wait first (shared by both clients).

Retried, for idempotent calls only (``operations.Call.idempotent``): no answer at all
(connection refused or dropped, a timeout), and the answers that mean "not now" — 503
(Corral says so while Postgres restarts, with ``Retry-After``) and 429 (a rate limit,
with ``Retry-After``). The wait is the server's ``Retry-After`` when it gives one,
capped, else a doubling backoff. Attempts are bounded: a client never hangs on a server
that stays down, it raises ``ConnectionFailed`` or the last ``ApiError``.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

RETRY_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 3  # sends after the first
    backoff_s: float = 0.5  # first wait when the server names none; doubles
    max_wait_s: float = 30.0  # a longer Retry-After is cut to this

    def backoff(self, attempt: int) -> float:
        return min(self.backoff_s * 2.0 ** (attempt - 1), self.max_wait_s)

    def after_error(self, idempotent: bool, attempt: int) -> float | None:
        """Seconds to wait before sending again after no answer; ``None``: give up."""
        if not idempotent or attempt > self.retries:
            return None
        return self.backoff(attempt)

    def after_response(self, idempotent: bool, attempt: int, response: httpx.Response) -> float | None:
        """Seconds to wait before sending again after this answer; ``None``: it stands."""
        if response.status_code not in RETRY_STATUSES or not idempotent or attempt > self.retries:
            return None
        return retry_after(response, self.max_wait_s) or self.backoff(attempt)


def retry_after(response: httpx.Response, cap_s: float) -> float | None:
    """``Retry-After`` in seconds (the delta form; an HTTP date counts as absent)."""
    value = response.headers.get("Retry-After", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return min(max(seconds, 0.0), cap_s)
