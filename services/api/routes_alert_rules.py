"""``/api/v1/alert-rules``: the alert rules in force; overrides by an admin.

The alerter owns its rules (DESIGN.md §1): a change here is a *request* (202), recorded
as an event the alerter carries out within moments. What ``PUT`` sends is merged over the
alerter's rules file, mapping by mapping, so a document gives only what it changes::

    {"conditions": {"job_pending_too_long": {"after_s": 900}},
     "events": {"job_failed": {"labels": {"team": "ml-platform"}}}}

Each ``PUT`` replaces the previous overrides; ``DELETE`` drops them (the file alone is in
force again). A document the rules model refuses gets a 400 naming each field, and
changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel

from services.api.auth import AuthenticatedPrincipal
from services.api.deps import repository, require_admin
from shared.alert_rules import AlertRules

router = APIRouter(prefix="/api/v1/alert-rules", tags=["alerts"])


class RulesView(BaseModel):
    rules: dict[str, Any] | None  # None until the alerter has started once
    overrides: dict[str, Any]
    overrides_version: int
    overrides_by: str | None
    overrides_at: datetime | None
    in_force_version: int | None  # the overrides version the alerter has applied
    file: str | None
    problem: str | None  # a refused file edit or override; what was in force stays
    detail: str


class RulesAccepted(BaseModel):
    detail: str


@router.get("", operation_id="getAlertRules", response_model=RulesView)
async def get_rules(request: Request, _: AuthenticatedPrincipal) -> RulesView:
    """The rules in force (file and overrides merged), the overrides, and any problem."""
    row = await repository(request).alert_rules()
    if row["rules"] is None:
        detail = "the alerter has not started yet: the rules in force are not known"
    elif row["in_force_version"] != row["overrides_version"]:
        detail = "the latest overrides are being applied"
    else:
        detail = "in force"
    return RulesView(**row, detail=detail)


@router.put("", status_code=202, operation_id="setAlertRules", response_model=RulesAccepted)
async def set_rules(
    overrides: AlertRules, request: Request, principal: AuthenticatedPrincipal
) -> RulesAccepted:
    """Override the rules file with this document, merged over it (admin)."""
    require_admin(principal, "change the alert rules")
    # Only what the document gives: the rest stays as the file says.
    await repository(request).request_alert_rules(
        "set", overrides.model_dump(exclude_unset=True), principal.username
    )
    return RulesAccepted(detail="overrides requested; GET /api/v1/alert-rules shows them in force shortly")


@router.delete("", status_code=202, operation_id="resetAlertRules", response_model=RulesAccepted)
async def reset_rules(request: Request, principal: AuthenticatedPrincipal) -> RulesAccepted:
    """Drop the overrides: the rules file alone is in force again (admin)."""
    require_admin(principal, "change the alert rules")
    await repository(request).request_alert_rules("clear", {}, principal.username)
    return RulesAccepted(detail="reset requested; the rules file alone will be in force shortly")
