"""The cluster slice's repository, as a route asks for it (``ClusterRepo``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from services.api.cluster.repository import ClusterRepository
from services.api.dependencies import Db


async def cluster_repository(db: Db) -> ClusterRepository:
    return ClusterRepository(db)


ClusterRepo = Annotated[ClusterRepository, Depends(cluster_repository)]
