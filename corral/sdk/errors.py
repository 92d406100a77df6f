"""What can go wrong when talking to Corral, as three exceptions under one base.

* ``ApiError``: the API answered with an error. Corral answers every error as RFC 9457
  problem+json, so the exception carries the problem's ``status``, ``type``, ``title``
  and ``detail`` (and ``errors``, one entry per wrong field, for a 422). A body that is
  not problem+json (a proxy's HTML page) still becomes an ``ApiError``, with the text as
  its detail, so callers need only one ``except``.
* ``ConnectionFailed``: no answer at all (refused, reset, timed out), after the retries
  an idempotent call is allowed.
* ``ConfigurationError``: no URL or token could be found before anything was sent.
"""

from __future__ import annotations

from typing import Any

import httpx

# Where the API's problem types live: a problem's ``type`` is this path plus the type's
# slug, relative to the API's URL (``GET`` it there for what the problem means).
PROBLEM_BASE = "/docs/problems/"


class CorralError(Exception):
    """Every error the SDK raises."""


class ConfigurationError(CorralError):
    """No token, or an unreadable config file: nothing was sent."""


class ConnectionFailed(CorralError):
    """The API could not be reached (after the retries an idempotent call is allowed)."""

    def __init__(self, url: str, cause: Exception) -> None:
        super().__init__(f"cannot reach the Corral API at {url} ({cause or type(cause).__name__})")
        self.url = url


class ApiError(CorralError):
    """The API refused or failed a request; the fields are those of its problem+json."""

    def __init__(
        self,
        status: int,
        type: str,
        title: str,
        detail: str,
        instance: str | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(f"{status}: {detail or title}")
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.instance = instance
        self.errors = errors or []

    @property
    def slug(self) -> str:
        """The problem type's last part, e.g. ``not-found`` or ``invalid-input`` (of
        ``/docs/problems/not-found``, or of any absolute URI ending so)."""
        return self.type.rstrip("/").rsplit("/", 1)[-1]

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            text = response.text.strip()[:500] or response.reason_phrase
            return cls(response.status_code, "about:blank", response.reason_phrase, text)
        return cls(
            status=int(body.get("status") or response.status_code),
            type=str(body.get("type") or "about:blank"),
            title=str(body.get("title") or response.reason_phrase),
            detail=str(body.get("detail") or body.get("title") or response.reason_phrase),
            instance=body.get("instance"),
            errors=body.get("errors") if isinstance(body.get("errors"), list) else None,
        )
