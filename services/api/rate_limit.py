"""Per-token rate limits: a token bucket per bearer token, in this API process.

Every ``/api/`` request takes one token from its caller's bucket (``rate_limit_per_s``
sustained, ``rate_limit_burst`` at once); a submit (``POST /api/v1/jobs``, a resubmit)
also takes one from a second, smaller bucket (``submit_rate_limit_*``), since a submit
is the one call that creates work for the whole cluster. An empty bucket answers 429
with ``Retry-After`` (whole seconds until a token is back) and a problem+json body;
nothing reaches the route, so nothing changes.

The caller is the ``Authorization`` header (its SHA-256, so no token sits in memory in
the clear): a token is limited however many users share it, and two tokens of one user
are limited apart — the limit protects the API from a runaway script, which holds one
token. The portal's form posts (a cancel, a resubmit, an acknowledgement) are limited
the same way by their session cookie. Requests without either are limited by client
address (they can only earn 401s).

**Per process.** The buckets live in this process's memory: N API processes behind a
load balancer let a token through at up to N times the rate. That keeps a submit free of
a shared round trip (the submit path is measured at thousands per second); the limits
are a guard against floods, not a billing meter. A bounded map: beyond ``MAX_CALLERS``
the full buckets (those indistinguishable from new ones) are forgotten first.

A pure ASGI middleware (not ``BaseHTTPMiddleware``): it costs a dictionary lookup and
some arithmetic per request, and never touches the body.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.api.problems import problem
from shared.metrics import ASGIApp, Receive, Scope, Send

MAX_CALLERS = 100_000
# A submit: the API's, and a resubmit from the API or from the portal's job page.
_SUBMIT_RE = re.compile(r"^(/api/v1/jobs(/[^/]+/resubmit)?/?|/jobs/[^/]+/resubmit)$")
# The portal's session cookie (services/api/portal/session.py): its form posts are limited
# by session as the API's calls are by token.
SESSION_COOKIE = b"corral_session"


def _limited(path: str, method: str) -> bool:
    """Every API call, and every form the portal posts (its pages are reads the API's
    own routes would serve; their live updates are throttled by design: portal/live.py)."""
    return path.startswith("/api/") or (method == "POST" and not path.startswith("/static/"))


@dataclass
class TokenBucket:
    rate: float  # tokens per second
    burst: int
    tokens: float
    at: float  # time.monotonic() of ``tokens``

    def take(self, now: float) -> float:
        """Take a token: 0.0 if there was one, else the seconds until there will be."""
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate

    def full(self, now: float) -> bool:
        return self.tokens + (now - self.at) * self.rate >= self.burst


class Buckets:
    """One bucket per caller, for one limit (``rate`` 0: unlimited)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    def take(self, caller: str) -> float:
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        bucket = self._buckets.get(caller)
        if bucket is None:
            if len(self._buckets) >= MAX_CALLERS:
                self._forget_full(now)
            bucket = self._buckets[caller] = TokenBucket(self.rate, self.burst, float(self.burst), now)
        return bucket.take(now)

    def _forget_full(self, now: float) -> None:
        self._buckets = {k: b for k, b in self._buckets.items() if not b.full(now)}
        if len(self._buckets) >= MAX_CALLERS:
            self._buckets.clear()  # crude but bounded: a flood of tokens cannot grow memory


class RateLimit:
    """ASGI middleware: 429 + ``Retry-After`` once a caller's bucket is empty."""

    def __init__(
        self,
        app: ASGIApp,
        per_s: float,
        burst: int,
        submit_per_s: float,
        submit_burst: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.requests = Buckets(per_s, burst, clock)
        self.submits = Buckets(submit_per_s, submit_burst, clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or not _limited(path, scope["method"]):
            await self.app(scope, receive, send)
            return
        caller = _caller(scope)
        wait_s = self.requests.take(caller)
        what = "requests"
        if not wait_s and scope["method"] == "POST" and _SUBMIT_RE.match(path):
            wait_s, what = self.submits.take(caller), "submits"
        if not wait_s:
            await self.app(scope, receive, send)
            return
        limit = self.submits if what == "submits" else self.requests
        retry_after = max(1, math.ceil(wait_s))
        response = problem(
            429,
            "rate-limited",
            "Too many requests",
            f"this token may make {limit.rate:g} {what} per second (bursts of {limit.burst});"
            f" retry after {retry_after} s",
            path,
        )
        response.headers["Retry-After"] = str(retry_after)
        await response(scope, receive, send)


def _caller(scope: Scope) -> str:
    headers = scope.get("headers", [])
    for name, value in headers:
        if name == b"authorization":
            return hashlib.sha256(value).hexdigest()
    for name, value in headers:
        if name == b"cookie":
            for part in value.split(b";"):
                key, _, secret = part.strip().partition(b"=")
                if key == SESSION_COOKIE and secret:
                    return "session:" + hashlib.sha256(secret).hexdigest()
    client = scope.get("client")
    return f"address:{client[0] if client else 'unknown'}"
