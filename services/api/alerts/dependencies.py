"""The alerts slice's repository, as a route asks for it (``AlertsRepo``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from services.api.alerts.repository import AlertRepository
from services.api.dependencies import Db


async def alert_repository(db: Db) -> AlertRepository:
    return AlertRepository(db)


AlertsRepo = Annotated[AlertRepository, Depends(alert_repository)]
