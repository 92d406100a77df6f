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

from dataclasses import asdict
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel

from services.api import SOURCE
from services.api.alerts.dependencies import AlertsRepo
from services.api.tenants.auth import AuthenticatedPrincipal, require_admin
from shared.alert_rules import AlertRules
from shared.events import AlertRulesRequested
from shared.events.alerts import AlertRulesRequestedData

router = APIRouter(prefix="/api/v1/alert-rules", tags=["alerts"])
RULES_AGGREGATE = "alert-rules"  # one set of rules: every change in one order


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
async def get_rules(_: AuthenticatedPrincipal, repo: AlertsRepo) -> RulesView:
    """The rules in force (file and overrides merged), the overrides, and any problem."""
    row = await repo.alert_rules()
    if row.rules is None:
        detail = "the alerter has not started yet: the rules in force are not known"
    elif row.in_force_version != row.overrides_version:
        detail = "the latest overrides are being applied"
    else:
        detail = "in force"
    return RulesView(**asdict(row), detail=detail)


@router.put("", status_code=202, operation_id="setAlertRules", response_model=RulesAccepted)
async def set_rules(
    overrides: AlertRules, principal: AuthenticatedPrincipal, repo: AlertsRepo
) -> RulesAccepted:
    """Override the rules file with this document, merged over it (admin)."""
    require_admin(principal, "change the alert rules")
    # Only what the document gives: the rest stays as the file says.
    await repo.append_event(
        _requested("set", overrides.model_dump(exclude_unset=True), principal.username), RULES_AGGREGATE
    )
    return RulesAccepted(detail="overrides requested; GET /api/v1/alert-rules shows them in force shortly")


@router.delete("", status_code=202, operation_id="resetAlertRules", response_model=RulesAccepted)
async def reset_rules(principal: AuthenticatedPrincipal, repo: AlertsRepo) -> RulesAccepted:
    """Drop the overrides: the rules file alone is in force again (admin)."""
    require_admin(principal, "change the alert rules")
    await repo.append_event(_requested("clear", {}, principal.username), RULES_AGGREGATE)
    return RulesAccepted(detail="reset requested; the rules file alone will be in force shortly")


def _requested(action: Literal["set", "clear"], overrides: dict[str, Any], by: str) -> AlertRulesRequested:
    """A change to the rules, as a request the alerter applies."""
    return AlertRulesRequested(
        source=SOURCE,
        subject=RULES_AGGREGATE,
        data=AlertRulesRequestedData(action=action, by=by, overrides=overrides),
    )
