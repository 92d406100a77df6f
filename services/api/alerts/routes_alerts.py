"""``/api/v1/alerts``: list, one with its history, acknowledge, resolve.

Alerts belong to the alerter (DESIGN.md §1): an acknowledge or resolve is recorded here
as an event and answered 202; the alerter applies it within moments (a second request
for an alert that already moved on changes nothing).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, Field

from services.api import SOURCE
from services.api.alerts.dependencies import AlertsRepo
from services.api.alerts.repository import AlertRepository, AlertRow
from services.api.tenants.auth import AuthenticatedPrincipal, Principal
from shared.errors import Conflict, NotFound
from shared.events import AlertActionRequested
from shared.events.alerts import AlertActionRequestedData

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
    principal: AuthenticatedPrincipal,
    repo: AlertsRepo,
    state: AlertState | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AlertList:
    """Newest first (admins: all; others: alerts about their own jobs)."""
    rows = await repo.list_alerts(state, _scope(principal), None, limit)
    return AlertList(items=[AlertView.model_validate(r, from_attributes=True) for r in rows])


async def _visible(repo: AlertRepository, principal: Principal, alert_id: str) -> AlertRow:
    rows = await repo.list_alerts(None, _scope(principal), alert_id, 1)
    if not rows:
        raise NotFound(f"no alert {alert_id!r}; list them with GET /api/v1/alerts")
    return rows[0]


@router.get("/{alert_id}", operation_id="getAlert", response_model=AlertDetail)
async def get_alert(alert_id: AlertId, principal: AuthenticatedPrincipal, repo: AlertsRepo) -> AlertDetail:
    """One alert with every change of state: who, when, and their note."""
    alert = await _visible(repo, principal, alert_id)
    history = [asdict(t) for t in await repo.alert_transitions(alert_id)]
    return AlertDetail.model_validate({**asdict(alert), "history": history})


async def _act(
    repo: AlertRepository,
    principal: Principal,
    alert_id: str,
    action: Literal["acknowledge", "resolve"],
    body: AlertAction,
) -> AlertActionAccepted:
    alert = await _visible(repo, principal, alert_id)
    allowed = {"acknowledge": ("firing",), "resolve": ("firing", "acknowledged")}[action]
    if alert.state not in allowed:
        raise Conflict(
            f"alert {alert_id} is {alert.state}; only a {' or '.join(allowed)} alert can be {action}d"
        )
    # A request for the alerter, which carries it out.
    event = AlertActionRequested(
        source=SOURCE,
        subject=alert_id,
        data=AlertActionRequestedData(
            alert_id=alert_id, action=action, by=principal.username, note=body.note
        ),
    )
    await repo.append_event(event, alert_id)
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
    responses={409: {"description": "the alert is not firing"}},
)
async def acknowledge_alert(
    alert_id: AlertId, principal: AuthenticatedPrincipal, repo: AlertsRepo, body: AlertAction | None = None
) -> AlertActionAccepted:
    """ "I'm on it": a firing alert becomes acknowledged (and stops escalating). An alert
    that is not firing cannot be (409)."""
    return await _act(repo, principal, alert_id, "acknowledge", body or AlertAction())


@router.post(
    "/{alert_id}/resolve",
    status_code=202,
    operation_id="resolveAlert",
    response_model=AlertActionAccepted,
    responses={409: {"description": "the alert is resolved already"}},
)
async def resolve_alert(
    alert_id: AlertId, principal: AuthenticatedPrincipal, repo: AlertsRepo, body: AlertAction | None = None
) -> AlertActionAccepted:
    """Close an alert by hand (most close themselves when their cause goes away). One
    resolved already cannot be (409)."""
    return await _act(repo, principal, alert_id, "resolve", body or AlertAction())
