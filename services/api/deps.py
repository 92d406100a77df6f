"""What every route module needs from the request: the repository, and the admin check."""

from __future__ import annotations

from fastapi import Request

from services.api.auth import Principal
from services.api.repository import ApiRepository
from shared.errors import Forbidden


def repository(request: Request) -> ApiRepository:
    repo: ApiRepository = request.app.state.repo
    return repo


def require_admin(principal: Principal, to: str) -> None:
    """403 unless an admin asks; ``to`` says what only an admin may do."""
    if not principal.is_admin:
        raise Forbidden(f"only an admin may {to}")
