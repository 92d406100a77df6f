"""Refuse request bodies larger than the limit (413) before reading them.

A pure ASGI middleware, like ``HttpMetrics`` and ``RateLimit``, not Starlette's
``BaseHTTPMiddleware``: that one runs the rest of the app in a task of its own and passes
every response chunk through a memory stream — about a tenth of the API's CPU per submit,
and a task switch per event on every SSE stream. This one looks at ``Content-Length``
and otherwise passes ``receive`` and ``send`` through untouched. (A body without a
``Content-Length``, chunked, is bounded where it is read: ``jobs/body.py``.)

Bodies sent to a task through ``/proxy/`` are not limited here: the proxy streams them
to the task as they come and never holds one whole (a file uploaded to a notebook).
"""

from __future__ import annotations

from starlette.requests import Request

from services.api.problems import problem
from shared.metrics import ASGIApp, Receive, Scope, Send

PROXY_PREFIX = "/proxy/"


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith(PROXY_PREFIX):
            length = Request(scope).headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
                response = problem(
                    413,
                    "too-large",
                    "Request body too large",
                    f"the body may be at most {self.max_bytes} bytes",
                    scope["path"],
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
