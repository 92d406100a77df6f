"""How a ``kind: service`` job is served: replicas, the port the gateway reaches, probes.
Part of the job spec (``shared/jobs.py``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from shared.request_types import Integer


class Probe(BaseModel):
    """An HTTP GET the node agent sends to a replica (a Kubernetes httpGet probe on pods):
    any 2xx or 3xx answer within ``timeout_s`` passes; ``failure_threshold`` failures in a
    row fail it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    path: str = Field(default="/", max_length=512, pattern=r"^/[\x21-\x7e]*$")
    port: str | None = Field(
        default=None, description="a port label of the role; the service's port if omitted"
    )
    period_s: float = Field(default=2.0, ge=0.1, le=300)
    timeout_s: float = Field(default=1.0, ge=0.1, le=60)
    failure_threshold: Integer = Field(default=3, ge=1, le=100)
    initial_delay_s: float = Field(default=0.0, ge=0, le=3600)


class ServiceSpec(BaseModel):
    """How a ``kind: service`` job is served: its replicas, the labelled port the gateway
    sends requests to, its probes, and who may call it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    replicas: Integer = Field(default=1, ge=0, le=64, description="copies kept running (not a gang)")
    port: str = Field(description="the port label /serve/{name}/... reaches on a ready replica")
    readiness: Probe | None = Field(
        default=None,
        description="in rotation only while this passes; omitted: once the replica listens on its port",
    )
    liveness: Probe | None = Field(default=None, description="the replica is restarted when this fails")
    public: bool = Field(default=False, description="anyone may call /serve/{name}/..., without a token")
    drain_s: float = Field(
        default=5.0, ge=0, le=600, description="out of rotation this long before an old replica is stopped"
    )
