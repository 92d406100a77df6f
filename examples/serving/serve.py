"""Serve the points classifier over HTTP: one replica of a Corral service.

    python serve.py        # listens on $CORRAL_PORT_HTTP (the role's ``http`` port)

Corral places the model input read-only at ``$CORRAL_MODEL_DIR_<NAME>`` (its last path
part is the version) and reaches the replica through the gateway at
``/serve/<service>/...``; the service's readiness probe asks ``GET /healthz``.

- ``GET /healthz``: 503 while the model loads, 200 once it is loaded. The model loads in
  a thread after the server starts listening, so the probe sees a replica that is up but
  not yet ready: that window is what keeps a new version out of rotation during a
  rolling update until it can really answer.
- ``POST /predict`` ``{"points": [[x, y], ...]}``: each point's class and confidence,
  with the model name and version that answered (so a caller sees a rolling update
  switch versions).
- ``GET /``: the model's name, version and training summary.

SIGTERM (Corral stopping a drained replica) lets uvicorn finish the requests in flight
before it exits.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import uvicorn
from points import load, model_directory, model_version, predict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from torch import nn

MAX_POINTS = 10_000
# A real model takes a while to load; this one is instant, so a replica can be told to
# wait (seconds) to show that the gateway sends it nothing until it is ready.
LOAD_DELAY_S = float(os.environ.get("LOAD_DELAY_S", "0"))


@dataclass
class Served:
    name: str
    version: int | None
    model: nn.Module | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None  # why the model could not be loaded


def _load(served: Served) -> None:
    time.sleep(LOAD_DELAY_S)
    _, directory = model_directory(served.name)
    try:
        served.model, served.meta = load(directory)
    except (OSError, RuntimeError, ValueError, KeyError) as exc:
        # Said by /healthz (500): a liveness probe on it restarts the replica.
        served.failure = f"cannot load the model from {directory}: {exc}"


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    name, directory = model_directory()
    served = Served(name, model_version(directory))
    app.state.served = served
    # Loads while the server already answers (/healthz says 503 until it is done).
    loading = asyncio.create_task(asyncio.to_thread(_load, served))
    try:
        yield
    finally:
        loading.cancel()


def _served(request: Request) -> Served:
    served: Served = request.app.state.served
    return served


async def healthz(request: Request) -> JSONResponse:
    served = _served(request)
    if served.failure is not None:
        return JSONResponse({"status": "failed", "detail": served.failure}, status_code=500)
    if served.model is None:
        return JSONResponse({"status": "loading", "model": served.name}, status_code=503)
    return JSONResponse({"status": "ready", "model": served.name, "version": served.version})


async def info(request: Request) -> JSONResponse:
    served = _served(request)
    return JSONResponse({"model": served.name, "version": served.version, "meta": served.meta})


def _points(body: Any) -> torch.Tensor | str:
    """The request's points, or what is wrong with the request."""
    points = body.get("points") if isinstance(body, dict) else None
    if not isinstance(points, list) or not points:
        return 'send {"points": [[x, y], ...]}: a non-empty list of 2-D points'
    if len(points) > MAX_POINTS:
        return f"at most {MAX_POINTS} points per request; got {len(points)}"
    for index, point in enumerate(points):
        if not (
            isinstance(point, list)
            and len(point) == 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in point)
        ):
            return f"points[{index}] must be [x, y], two numbers; got {point!r}"
    return torch.tensor(points, dtype=torch.float32)


async def predict_route(request: Request) -> JSONResponse:
    served = _served(request)
    if served.model is None:
        return JSONResponse({"detail": "the model is still loading; retry shortly"}, status_code=503)
    try:
        body = await request.json()
    except ValueError:
        body = None
    points = _points(body)
    if isinstance(points, str):
        return JSONResponse({"detail": points}, status_code=422)
    predictions = predict(served.model, points)
    return JSONResponse(
        {
            "model": served.name,
            "version": served.version,
            "predictions": [{"label": label, "confidence": p} for label, p in predictions],
        }
    )


app = Starlette(
    routes=[
        Route("/", info),
        Route("/healthz", healthz),
        Route("/predict", predict_route, methods=["POST"]),
    ],
    lifespan=lifespan,
)


def main() -> None:
    torch.set_num_threads(1)  # small batches: a thread per request is what scales
    port = int(os.environ.get("CORRAL_PORT_HTTP", "8000"))
    # 0.0.0.0: the gateway reaches the replica at its node's address, not at loopback.
    uvicorn.run(app, host="0.0.0.0", port=port, log_level="warning", timeout_graceful_shutdown=10)


if __name__ == "__main__":
    main()
