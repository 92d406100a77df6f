"""``/alerts``: firing, acknowledged and resolved alerts; acknowledge and silence.

A view over the alerts slice: the list is ``GET /api/v1/alerts``'s (admins see every
alert, a user the alerts about their own jobs), and the two actions are the API's own
routes called with the form's fields read by the API's request models
(``AlertAction``, ``SilenceSpec``), so a wrong field gets the API's words, the alerter
gets the same request event, and the audit log the same row. Both are requests: the
alerter applies them within moments, and the page shows the change when it has.

Who may act is the API's rule: whoever sees an alert may acknowledge it (an admin, or
the owner of the job it is about) with a session whose token may write; only admins
silence. The page shows the buttons a user may use, and a form posted anyway is refused
as the API refuses it. A silence's matchers are the labels of the alert it was opened
from (each one a checkbox), for a duration from a list.

Live: the panel follows ``/live/alerts`` and fetches itself again through the same route
(``HX-Request``), except while one of its forms is open, so a refresh never throws away
what an admin is typing.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.api.alerts.dependencies import AlertsRepo
from services.api.alerts.routes_alerts import AlertAction, AlertId, acknowledge_alert, list_alerts
from services.api.alerts.routes_silences import SilenceSpec, create_silence, list_silences
from services.api.portal.dependencies import SignedIn, SignedInForm
from services.api.portal.errors import PortalRoute, form_as
from services.api.portal.rendering import render
from services.api.tenants.auth import require_admin

router = APIRouter(route_class=PortalRoute, include_in_schema=False)

StateFilter = Literal["firing", "acknowledged", "resolved", "all"]
STATES: tuple[StateFilter, ...] = ("firing", "acknowledged", "resolved", "all")
LIMIT = 200
# The windows a silence may last, as the form offers them (the API takes 60 s to 90 days).
DURATIONS_S = {
    3600: "1 hour",
    4 * 3600: "4 hours",
    12 * 3600: "12 hours",
    86_400: "1 day",
    3 * 86_400: "3 days",
    7 * 86_400: "1 week",
}
_REQUESTED = {
    "acknowledge": "Acknowledge requested: the alerter applies it within moments.",
    "silence": "Silence requested: matching alerts stop notifying within moments.",
}


@router.get("/alerts", response_class=HTMLResponse)
async def alerts_page(
    request: Request,
    user: SignedIn,
    repo: AlertsRepo,
    state: Annotated[StateFilter, Query()] = "firing",
) -> HTMLResponse:
    alerts = await list_alerts(user.principal, repo, None if state == "all" else state, LIMIT)
    silences = []
    if user.is_admin:
        silences = [s for s in (await list_silences(user.principal, repo)).items if s.status != "expired"]
    context: dict[str, Any] = {
        "alerts": alerts.items,
        "state": state,
        "states": STATES,
        "limit": LIMIT,
        "silences": silences,
        # As the API: whoever sees an alert may acknowledge it with a token that may write;
        # only admins silence.
        "may_act": "submit" in user.principal.scopes,
        "durations": DURATIONS_S,
        "requested": _REQUESTED.get(request.query_params.get("requested", "")),
    }
    template = "fragments/alerts_panel.html" if request.headers.get("HX-Request") else "alerts.html"
    return render(request, template, user, section="alerts", title="Alerts", **context)


@router.post("/alerts/{alert_id}/acknowledge")
async def acknowledge(
    alert_id: AlertId,
    user: SignedInForm,
    repo: AlertsRepo,
    note: Annotated[str, Form()] = "",
    back_to: Annotated[StateFilter, Form()] = "firing",
) -> Response:
    """The API's acknowledge (anyone who sees the alert: an admin, or the owner of its
    job), with the form's optional comment as its note. Back to the list the form was on:
    the alert moves on it once the alerter has acted."""
    await acknowledge_alert(alert_id, user.principal, repo, form_as(AlertAction, {"note": note}))
    return RedirectResponse(f"/alerts?state={back_to}&requested=acknowledge", status_code=303)


def _matcher(checked: str) -> dict[str, str]:
    """A ``name=value`` checkbox as an equality matcher (a label's name has no ``=``)."""
    name, _, value = checked.partition("=")
    return {"name": name, "op": "=", "value": value}


@router.post("/alerts/silence")
async def silence(
    user: SignedInForm,
    repo: AlertsRepo,
    matcher: Annotated[list[str] | None, Form()] = None,
    duration_s: Annotated[str, Form()] = "",
    comment: Annotated[str, Form()] = "",
    back_to: Annotated[StateFilter, Form()] = "firing",
) -> Response:
    """Admin: the API's silence, from now for a duration."""
    require_admin(user.principal, "create or expire silences")
    fields: dict[str, object] = {"matchers": [_matcher(m) for m in matcher or []], "comment": comment}
    if duration_s.strip():
        # The API's model takes a JSON number; a form sends text. Digits become the number,
        # anything else goes through as it is and is refused with the API's words.
        fields["duration_s"] = int(duration_s) if duration_s.strip().isdigit() else duration_s
    await create_silence(form_as(SilenceSpec, fields), user.principal, repo)
    return RedirectResponse(f"/alerts?state={back_to}&requested=silence", status_code=303)
