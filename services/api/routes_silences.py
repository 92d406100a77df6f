"""``/api/v1/silences``: create (admin), list, expire early (admin).

A silence mutes the notifications of the alerts whose labels its matchers fit, for a
window of time (one that starts later is a maintenance window); the alerts themselves
are still stored and listed. The alerter owns silences: creating or expiring one is a
request recorded here (202), carried out within moments.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, Field, model_validator

from services.api.auth import AuthenticatedPrincipal
from services.api.deps import repository, require_admin
from shared.errors import InvalidInput, NotFound
from shared.events.alerts import Matcher
from shared.ids import new_silence_id

router = APIRouter(prefix="/api/v1/silences", tags=["alerts"])
SilenceId = Annotated[str, Path(pattern=r"^sil-[0-9a-z]{1,40}$", description="a silence id, as listed")]
MAX_SILENCE = timedelta(days=90)


class SilenceSpec(BaseModel):
    matchers: list[Matcher] = Field(
        min_length=1, max_length=20, description="all must match an alert's labels"
    )
    starts_at: datetime | None = Field(default=None, description="default: now")
    ends_at: datetime | None = Field(default=None, description="give this or duration_s")
    duration_s: int | None = Field(default=None, ge=60, le=int(MAX_SILENCE.total_seconds()))
    comment: str = Field(default="", max_length=1000, pattern=r"^[^\x00]*$")

    @model_validator(mode="after")
    def _window(self) -> SilenceSpec:
        if (self.ends_at is None) == (self.duration_s is None):
            raise ValueError("give exactly one of ends_at and duration_s")
        for stamp in (self.starts_at, self.ends_at):
            if stamp is not None and stamp.tzinfo is None:
                raise ValueError("times need a timezone, e.g. 2026-11-22T18:00:00Z")
        return self

    def window(self) -> tuple[datetime, datetime]:
        starts = self.starts_at or datetime.now(UTC)
        ends = self.ends_at or starts + timedelta(seconds=self.duration_s or 0)
        return starts, ends


class SilenceView(BaseModel):
    id: str
    matchers: list[Matcher]
    starts_at: datetime
    ends_at: datetime
    status: Literal["pending", "active", "expired"]
    created_by: str
    comment: str
    created_at: datetime
    expired_by: str | None


class SilenceList(BaseModel):
    items: list[SilenceView]


class SilenceAccepted(BaseModel):
    id: str
    detail: str


@router.post("", status_code=202, operation_id="createSilence", response_model=SilenceAccepted)
async def create_silence(
    spec: SilenceSpec, request: Request, principal: AuthenticatedPrincipal
) -> SilenceAccepted:
    """Mute notifications of matching alerts for a window (admin)."""
    require_admin(principal, "create or expire silences")
    try:
        starts, ends = spec.window()
    except OverflowError:
        raise InvalidInput("the silence would end after the year 9999: choose a nearer time") from None
    if ends <= starts:
        raise InvalidInput("the silence ends before it starts: ends_at must be after starts_at")
    if ends <= datetime.now(UTC):
        raise InvalidInput("the silence would already be over: ends_at must be in the future")
    if ends - starts > MAX_SILENCE:
        raise InvalidInput("a silence lasts at most 90 days; create another when it ends")
    silence_id = new_silence_id()
    await repository(request).request_silence(
        silence_id, "create", principal.username, spec.matchers, starts, ends, spec.comment
    )
    return SilenceAccepted(
        id=silence_id, detail=f"silence requested; GET /api/v1/silences/{silence_id} shows it shortly"
    )


@router.get("", operation_id="listSilences", response_model=SilenceList)
async def list_silences(request: Request, _: AuthenticatedPrincipal) -> SilenceList:
    """Newest first, with their status: pending (starts later), active, expired."""
    return SilenceList(
        items=[SilenceView.model_validate(r) for r in await repository(request).list_silences(None)]
    )


@router.get("/{silence_id}", operation_id="getSilence", response_model=SilenceView)
async def get_silence(silence_id: SilenceId, request: Request, _: AuthenticatedPrincipal) -> SilenceView:
    rows = await repository(request).list_silences(silence_id)
    if not rows:
        raise NotFound(f"no silence {silence_id!r} (yet); list them with GET /api/v1/silences")
    return SilenceView.model_validate(rows[0])


@router.delete("/{silence_id}", status_code=202, operation_id="expireSilence", response_model=SilenceAccepted)
async def expire_silence(
    silence_id: SilenceId, request: Request, principal: AuthenticatedPrincipal
) -> SilenceAccepted:
    """End a silence now (admin); notifications flow again for new alerts."""
    require_admin(principal, "create or expire silences")
    if not await repository(request).list_silences(silence_id):
        raise NotFound(f"no silence {silence_id!r}; list them with GET /api/v1/silences")
    await repository(request).request_silence(silence_id, "expire", principal.username, [], None, None, "")
    return SilenceAccepted(id=silence_id, detail="expiry requested")
