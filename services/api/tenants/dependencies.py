"""The tenants slice's repository, as a route asks for it (``TenantsRepo``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from services.api.dependencies import Db
from services.api.tenants.repository import TenantRepository


async def tenant_repository(db: Db) -> TenantRepository:
    return TenantRepository(db)


TenantsRepo = Annotated[TenantRepository, Depends(tenant_repository)]
