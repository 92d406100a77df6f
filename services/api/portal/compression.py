"""The portal's pages, gzipped: the API's own answers, untouched.

A page is mostly repeated markup (the nodes page is one element per GPU: about 1 MB of
HTML for 4,000 GPUs, a few percent of that gzipped), and a live tab fetches its panels
again and again, so compressing them is what keeps a hundred open tabs cheap on the
wire. The API's JSON is left alone: its answers are small and its clients' CPU and
latency were measured without compression. Event streams are never compressed
(Starlette's middleware skips ``text/event-stream``: a buffered stream would not be live).
Nor are a task's own answers through ``/proxy/``: they are streamed as the app sends them,
and often compressed by the app already.
"""

from __future__ import annotations

from starlette.middleware.gzip import GZipMiddleware

from shared.metrics import ASGIApp, Receive, Scope, Send

# Below this, gzip's header and the CPU cost more than they save.
MINIMUM_BYTES = 4096
# Level 5: most of level 9's ratio on markup this repetitive, at a fraction of its CPU.
LEVEL = 5


class PortalCompression:
    """ASGI middleware: gzip for every path outside ``/api/`` and ``/proxy/``, when the
    client accepts it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=MINIMUM_BYTES, compresslevel=LEVEL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("path", "").startswith(("/api/", "/proxy/")):
            await self.gzip(scope, receive, send)
        else:
            await self.app(scope, receive, send)
