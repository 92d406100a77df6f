"""What every route module needs from the request: the repository, and the admin check."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request

from services.api.auth import Principal
from services.api.repository import ApiRepository
from shared.errors import Forbidden, TransientError

AskScheduler = Callable[[bytes], Awaitable[bytes]]


def repository(request: Request) -> ApiRepository:
    repo: ApiRepository = request.app.state.repo
    return repo


def require_admin(principal: Principal, to: str) -> None:
    """403 unless an admin asks with a token that carries the ``admin`` scope; ``to`` says
    what only an admin may do."""
    if principal.role == "admin" and not principal.is_admin:
        raise Forbidden(f"only an admin may {to}, and this token lacks the 'admin' scope; use one with it")
    if not principal.is_admin:
        raise Forbidden(f"only an admin may {to}")


async def ask_scheduler(request: Request, question: bytes) -> bytes:
    """The scheduler's answer to a question (a dry run); 503 when none comes."""
    ask: AskScheduler | None = request.app.state.ask_scheduler
    if ask is None:
        raise TransientError("this API serves no scheduler questions (no message bus); try again later")
    try:
        return await ask(question)
    except TimeoutError:
        raise TransientError(
            "the scheduler did not answer in time; is it running? (GET /api/v1/services)"
        ) from None
