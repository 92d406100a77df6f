"""The alerts slice's routes: alerts, silences, the alert rules."""

from __future__ import annotations

from fastapi import APIRouter

from services.api.alerts import routes_alert_rules, routes_alerts, routes_silences

router = APIRouter()
for part in (routes_alerts, routes_silences, routes_alert_rules):
    router.include_router(part.router)
