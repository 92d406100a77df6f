"""``/api/v1/alerts``: list, one with its history, acknowledge, resolve.

Alerts belong to the alerter (DESIGN.md §1): an acknowledge or resolve is recorded here
as an event and answered 202; the alerter applies it within moments (a second request
for an alert that already moved on changes nothing).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field

from services.api.auth import AuthenticatedPrincipal, Principal
from services.api.deps import repository
from shared.errors import Conflict, NotFound

router = APIRouter(prefix="/api/v1/alerts", tags=["alerts"])
AlertId = Annotated[str, Path(pattern=r"^alr-[0-9a-z]{1,40}$", description="an alert id, as listed")]
AlertState = Literal["firing", "acknowledged", "resolved"]


class AlertView(BaseModel):
    id: str
    rule: str
    severity: str
    state: AlertState
    summary: str
    labels: dict[str, str]
    started_at: datetime
    updated_at: datetime
    acknowledged_by: str | None
    acknowledged_at: datetime | None
    resolved_by: str | None
    resolved_at: datetime | None


class TransitionView(BaseModel):
    at: datetime
    from_state: str | None = Field(description="null when the alert was opened")
    to_state: AlertState
    actor: str
    note: str


class AlertDetail(AlertView):
    history: list[TransitionView]


class AlertList(BaseModel):
    items: list[AlertView]


class AlertAction(BaseModel):
    note: str = Field(
        default="", max_length=1000, pattern=r"^[^\x00]*$", description="e.g. 'on it', 'PSU swapped'"
    )


class AlertActionAccepted(BaseModel):
    alert_id: str
    action: Literal["acknowledge", "resolve"]
    detail: str


def _scope(principal: Principal) -> str | None:
    """Admins see every alert; a user, the alerts about their own jobs."""
    return None if principal.is_admin else principal.username


@router.get("", operation_id="listAlerts", response_model=AlertList)
async def list_alerts(
    request: Request,
    principal: AuthenticatedPrincipal,
    state: AlertState | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AlertList:
    """Newest first (admins: all; others: alerts about their own jobs)."""
    rows = await repository(request).list_alerts(state, _scope(principal), None, limit)
    return AlertList(items=[AlertView.model_validate(r) for r in rows])


async def _visible(request: Request, principal: Principal, alert_id: str) -> dict[str, object]:
    rows = await repository(request).list_alerts(None, _scope(principal), alert_id, 1)
    if not rows:
        raise NotFound(f"no alert {alert_id!r}; list them with GET /api/v1/alerts")
    return rows[0]


@router.get("/{alert_id}", operation_id="getAlert", response_model=AlertDetail)
async def get_alert(alert_id: AlertId, request: Request, principal: AuthenticatedPrincipal) -> AlertDetail:
    """One alert with every change of state: who, when, and their note."""
    alert = await _visible(request, principal, alert_id)
    history = await repository(request).alert_transitions(alert_id)
    return AlertDetail.model_validate({**alert, "history": history})


async def _act(
    request: Request,
    principal: Principal,
    alert_id: str,
    action: Literal["acknowledge", "resolve"],
    body: AlertAction,
) -> AlertActionAccepted:
    alert = await _visible(request, principal, alert_id)
    allowed = {"acknowledge": ("firing",), "resolve": ("firing", "acknowledged")}[action]
    if alert["state"] not in allowed:
        raise Conflict(
            f"alert {alert_id} is {alert['state']}; only a {' or '.join(allowed)} alert can be {action}d"
        )
    await repository(request).request_alert_action(alert_id, action, principal.username, body.note)
    return AlertActionAccepted(
        alert_id=alert_id,
        action=action,
        detail=f"{action} requested; GET /api/v1/alerts/{alert_id} shows it shortly",
    )


@router.post(
    "/{alert_id}/acknowledge",
    status_code=202,
    operation_id="acknowledgeAlert",
    response_model=AlertActionAccepted,
)
async def acknowledge_alert(
    alert_id: AlertId, request: Request, principal: AuthenticatedPrincipal, body: AlertAction | None = None
) -> AlertActionAccepted:
    """ "I'm on it": a firing alert becomes acknowledged (and stops escalating)."""
    return await _act(request, principal, alert_id, "acknowledge", body or AlertAction())


@router.post(
    "/{alert_id}/resolve", status_code=202, operation_id="resolveAlert", response_model=AlertActionAccepted
)
async def resolve_alert(
    alert_id: AlertId, request: Request, principal: AuthenticatedPrincipal, body: AlertAction | None = None
) -> AlertActionAccepted:
    """Close an alert by hand (most close themselves when their cause goes away)."""
    return await _act(request, principal, alert_id, "resolve", body or AlertAction())
