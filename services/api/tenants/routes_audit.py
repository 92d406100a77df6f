"""``GET /api/v1/audit`` (admins): the audit log, newest first, with filters and a cursor.

What is recorded and when: ``services/api/audit.py``. Pages are keyed on the row id:
``next_cursor`` of one page, given as ``cursor``, yields the next (older) page; it is
null on the last. A keyset, not an offset, so rows written meanwhile neither repeat nor
shift a page.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from services.api.tenants.auth import AuthenticatedPrincipal, require_admin
from services.api.tenants.dependencies import TenantsRepo
from shared.jobs import NAME_PATTERN
from shared.request_types import Timestamp

router = APIRouter(prefix="/api/v1/audit", tags=["audit"])
_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"  # Postgres text holds no NUL


class AuditEntry(BaseModel):
    id: int
    at: datetime
    user: str | None = Field(description="null when the token did not verify (a 401)")
    token_id: str | None
    method: str
    route: str = Field(description="the route template, e.g. /api/v1/jobs/{job_id}/cancel")
    target: str | None = Field(description="what the call acted on or created: a job id, a VC name...")
    status: int = Field(description="the HTTP status answered")
    client: str | None = Field(description="the client's address as the API saw it")


class AuditPage(BaseModel):
    items: list[AuditEntry]
    next_cursor: str | None = Field(description="give it as cursor for the next (older) page")


@router.get("", operation_id="listAudit", response_model=AuditPage)
async def list_audit(
    principal: AuthenticatedPrincipal,
    repo: TenantsRepo,
    user: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    target: Annotated[str | None, Query(max_length=200, pattern=_PRINTABLE)] = None,
    method: Literal["POST", "PUT", "PATCH", "DELETE"] | None = None,
    route: Annotated[
        str | None, Query(max_length=200, pattern=_PRINTABLE, description="a route template")
    ] = None,
    since: Annotated[Timestamp | None, Query(description="at or after")] = None,
    until: Annotated[Timestamp | None, Query(description="before")] = None,
    min_status: Annotated[int | None, Query(ge=100, le=599, description="e.g. 400: refusals")] = None,
    # 18 digits at most: always a bigint, so a forged cursor is a 422, never a 500.
    cursor: Annotated[str | None, Query(pattern=r"^[1-9][0-9]{0,17}$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AuditPage:
    """Every mutating call: who, what, on what, the outcome, from where; newest first."""
    require_admin(principal, "read the audit log")
    before = int(cursor) if cursor else None
    rows = await repo.audit(before, user, target, method, route, since, until, min_status, limit + 1)
    page = [
        AuditEntry(
            id=r.id,
            at=r.at,
            user=r.username,
            token_id=r.token_id,
            method=r.method,
            route=r.route,
            target=r.target,
            status=r.status,
            client=r.client,
        )
        for r in rows[:limit]
    ]
    more = len(rows) > limit
    return AuditPage(items=page, next_cursor=str(page[-1].id) if more else None)
