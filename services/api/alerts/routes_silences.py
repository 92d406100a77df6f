"""``/api/v1/silences``: create (admin), list, expire early (admin).

A silence mutes the notifications of the alerts whose labels its matchers fit, for a
window of time (one that starts later is a maintenance window); the alerts themselves
are still stored and listed. The alerter owns silences: creating or expiring one is a
request recorded here (202), carried out within moments.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.api import SOURCE
from services.api.alerts.dependencies import AlertsRepo
from services.api.tenants.auth import AuthenticatedPrincipal, require_admin
from shared.errors import InvalidInput, NotFound
from shared.events import SilenceRequested
from shared.events.alerts import Matcher, SilenceRequestedData
from shared.ids import new_silence_id
from shared.request_types import Integer, Timestamp

router = APIRouter(prefix="/api/v1/silences", tags=["alerts"])
SilenceId = Annotated[str, Path(pattern=r"^sil-[0-9a-z]{1,40}$", description="a silence id, as listed")]
MAX_SILENCE = timedelta(days=90)


class SilenceSpec(BaseModel):
    """What ``POST /api/v1/silences`` takes: ``ends_at`` or ``duration_s``, not both."""

    # Strict: a JSON body's types are the schema's (shared/request_types.py). "Exactly one
    # of ends_at and duration_s", as a JSON schema says it (either may be given as null).
    model_config = ConfigDict(
        strict=True,
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["ends_at"],
                    "properties": {"ends_at": {"type": "string"}, "duration_s": {"type": "null"}},
                },
                {
                    "required": ["duration_s"],
                    "properties": {"duration_s": {"type": "integer"}, "ends_at": {"type": "null"}},
                },
            ]
        },
    )

    matchers: list[Matcher] = Field(
        min_length=1, max_length=20, description="all must match an alert's labels"
    )
    starts_at: Timestamp | None = Field(default=None, description="default: now")
    ends_at: Timestamp | None = Field(default=None, description="give this or duration_s")
    duration_s: Integer | None = Field(default=None, ge=60, le=int(MAX_SILENCE.total_seconds()))
    comment: str = Field(default="", max_length=1000, pattern=r"^[^\x00]*$")

    @model_validator(mode="after")
    def _window(self) -> SilenceSpec:
        if (self.ends_at is None) == (self.duration_s is None):
            raise ValueError("give exactly one of ends_at and duration_s")
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


@router.post(
    "",
    status_code=202,
    operation_id="createSilence",
    response_model=SilenceAccepted,
    responses={
        422: {
            "description": "a field is wrong (`errors` names it), or the window is not one: it ends "
            "before it starts or is over already, or lasts more than 90 days"
        }
    },
)
async def create_silence(
    spec: SilenceSpec, principal: AuthenticatedPrincipal, repo: AlertsRepo
) -> SilenceAccepted:
    """Mute notifications of matching alerts for a window (admin): from ``starts_at`` (now
    by default) until ``ends_at`` or for ``duration_s``. A window that is over already, ends
    before it starts or lasts more than 90 days is refused (422)."""
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
    await repo.append_event(
        _requested(silence_id, "create", principal.username, spec.matchers, starts, ends, spec.comment),
        silence_id,
    )
    return SilenceAccepted(
        id=silence_id, detail=f"silence requested; GET /api/v1/silences/{silence_id} shows it shortly"
    )


@router.get("", operation_id="listSilences", response_model=SilenceList)
async def list_silences(_: AuthenticatedPrincipal, repo: AlertsRepo) -> SilenceList:
    """Newest first, with their status: pending (starts later), active, expired."""
    return SilenceList(
        items=[SilenceView.model_validate(r, from_attributes=True) for r in await repo.list_silences(None)]
    )


@router.get("/{silence_id}", operation_id="getSilence", response_model=SilenceView)
async def get_silence(silence_id: SilenceId, _: AuthenticatedPrincipal, repo: AlertsRepo) -> SilenceView:
    rows = await repo.list_silences(silence_id)
    if not rows:
        raise NotFound(f"no silence {silence_id!r} (yet); list them with GET /api/v1/silences")
    return SilenceView.model_validate(rows[0], from_attributes=True)


@router.delete("/{silence_id}", status_code=202, operation_id="expireSilence", response_model=SilenceAccepted)
async def expire_silence(
    silence_id: SilenceId, principal: AuthenticatedPrincipal, repo: AlertsRepo
) -> SilenceAccepted:
    """End a silence now (admin); notifications flow again for new alerts."""
    require_admin(principal, "create or expire silences")
    if not await repo.list_silences(silence_id):
        raise NotFound(f"no silence {silence_id!r}; list them with GET /api/v1/silences")
    await repo.append_event(
        _requested(silence_id, "expire", principal.username, [], None, None, ""), silence_id
    )
    return SilenceAccepted(id=silence_id, detail="expiry requested")


def _requested(
    silence_id: str,
    action: Literal["create", "expire"],
    by: str,
    matchers: list[Matcher],
    starts_at: datetime | None,
    ends_at: datetime | None,
    comment: str,
) -> SilenceRequested:
    """A silence's creation or early end, as a request the alerter applies."""
    return SilenceRequested(
        source=SOURCE,
        subject=silence_id,
        data=SilenceRequestedData(
            silence_id=silence_id,
            action=action,
            by=by,
            matchers=matchers,
            starts_at=starts_at,
            ends_at=ends_at,
            comment=comment,
        ),
    )
