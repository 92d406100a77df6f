"""One error hierarchy for Corral.

Domain code raises these; the HTTP edge maps them to RFC 9457 problem documents once
(see ``services/api/problems.py``) and the bus consumer maps them to ack outcomes
(see ``shared/bus/consumer.py``). Third-party exceptions are wrapped with
``raise ... from`` so callers only ever catch ``CorralError``.
"""

from __future__ import annotations


class CorralError(Exception):
    """Base of every error Corral raises on purpose.

    ``problem_type`` is the stable, machine-readable slug used in problem+json
    (``/docs/problems/<slug>``, documented in docs/problems.md); ``status`` is the HTTP
    status it maps to.
    """

    problem_type = "internal"
    status = 500
    title = "Internal error"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidInput(CorralError):
    """The request is well-formed but asks for something that is not allowed."""

    problem_type = "invalid-input"
    status = 422
    title = "Invalid input"


class Unauthorized(CorralError):
    problem_type = "unauthorized"
    status = 401
    title = "Unauthorized"


class Forbidden(CorralError):
    problem_type = "forbidden"
    status = 403
    title = "Forbidden"


class NotFound(CorralError):
    problem_type = "not-found"
    status = 404
    title = "Not found"


class Conflict(CorralError):
    """The entity changed or is in a state where the operation makes no sense."""

    problem_type = "conflict"
    status = 409
    title = "Conflict"


class TransientError(CorralError):
    """Try again later: a bus handler raising this is nak'ed with ``delay_s``."""

    problem_type = "unavailable"
    status = 503
    title = "Temporarily unavailable"

    def __init__(self, detail: str, delay_s: float = 1.0) -> None:
        super().__init__(detail)
        self.delay_s = delay_s


class PermanentError(CorralError):
    """Retrying cannot help: a bus handler raising this dead-letters the message."""

    problem_type = "permanent"
    status = 422
    title = "Cannot be processed"
