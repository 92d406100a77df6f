"""A real OTLP/HTTP trace receiver on loopback, standing in for an OpenTelemetry Collector.

Services started with ``CORRAL_TELEMETRY_EXPORTER=otlp`` and ``OTEL_EXPORTER_OTLP_ENDPOINT``
pointing here export their spans with the SDK's own OTLP exporter (protobuf over HTTP,
``POST /v1/traces``); the collector decodes them with the OTLP protobuf definitions and
keeps them in memory, flattened to ``CollectedSpan``, for a test to read.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import uvicorn
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from corral.local.ports import free_port

SPAN_KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass(frozen=True)
class CollectedSpan:
    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root
    attributes: dict[str, object]


@dataclass
class OtlpCollector:
    port: int
    spans: list[CollectedSpan] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        CollectedSpan(
                            service=resource.get("service.name", ""),
                            name=span.name,
                            kind=SPAN_KINDS.get(span.kind, str(span.kind)),
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")

    def trace(self, trace_id: str) -> list[CollectedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]


def _value(value: object) -> object:
    kind = value.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(value, kind) if kind else None


@pytest.fixture
async def otlp_collector() -> AsyncIterator[OtlpCollector]:
    collector = OtlpCollector(free_port())
    app = Starlette(routes=[Route("/v1/traces", collector.handle, methods=["POST"])])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=collector.port, log_level="warning", lifespan="off")
    )
    serving = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.02)
    yield collector
    server.should_exit = True
    await serving
