"""The storage slice's repository, as a route asks for it (``StorageRepo``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from services.api.dependencies import Db
from services.api.storage.repository import StorageRepository


async def storage_repository(db: Db) -> StorageRepository:
    return StorageRepository(db)


StorageRepo = Annotated[StorageRepository, Depends(storage_repository)]
