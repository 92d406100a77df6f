"""What the models slice's routes ask FastAPI for: its repository."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends

from services.api.dependencies import Db
from services.api.models.repository import ModelRepository


async def model_repository(db: Db) -> ModelRepository:
    return ModelRepository(db)


ModelsRepo = Annotated[ModelRepository, Depends(model_repository)]
