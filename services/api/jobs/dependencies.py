"""What the jobs slice's routes ask FastAPI for: its repository, the cached cluster shape,
and the two request/reply questions a route may ask over the bus (absent without one)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from services.api.dependencies import Db
from services.api.jobs.admission import ShapeCache
from services.api.jobs.logs import AskNode
from services.api.jobs.repository import JobRepository

# Sends a dry-run question to the scheduler and returns its answer.
AskScheduler = Callable[[bytes], Awaitable[bytes]]


async def job_repository(db: Db) -> JobRepository:
    return JobRepository(db)


async def shape_cache(request: Request) -> ShapeCache:
    shapes: ShapeCache = request.app.state.shapes
    return shapes


async def scheduler(request: Request) -> AskScheduler | None:
    ask: AskScheduler | None = request.app.state.ask_scheduler
    return ask


async def nodes(request: Request) -> AskNode | None:
    ask: AskNode | None = request.app.state.ask_node
    return ask


JobsRepo = Annotated[JobRepository, Depends(job_repository)]
Shapes = Annotated[ShapeCache, Depends(shape_cache)]
MaybeScheduler = Annotated[AskScheduler | None, Depends(scheduler)]
MaybeNodes = Annotated[AskNode | None, Depends(nodes)]
