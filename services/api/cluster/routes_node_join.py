"""Node membership and bus identities: ``/api/v1/nodes/join-tokens``, ``/nodes/join``,
``DELETE /nodes/{id}``, ``/api/v1/integrations/bus-credentials`` (``node_join.py`` says
how).

Admins make join tokens, remove nodes and mint integrators' read-only bus credentials.
``POST /nodes/join`` takes no bearer token: the join token is its credential, good once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from services.api.cluster import node_join
from services.api.cluster.dependencies import ClusterRepo
from services.api.cluster.routes_nodes import NODE_ID, NodeId
from services.api.dependencies import SettingsDep
from services.api.settings import ApiSettings
from services.api.tenants.auth import AuthenticatedPrincipal, require_admin
from shared.bus.identities import INTEGRATOR_PREFIX, LIFECYCLE_STREAMS
from shared.errors import InvalidInput
from shared.request_types import Integer

router = APIRouter(prefix="/api/v1", tags=["nodes"])
STREAM_NAMES = {stream.removeprefix("CORRAL_").lower(): stream for stream in LIFECYCLE_STREAMS}
NOT_SET_UP = "this control plane is not set up to admit nodes (its `CORRAL_API_JOIN_*` settings)"
IntegratorName = Annotated[
    str, Path(pattern=r"^[a-z0-9][a-z0-9-]{0,39}$", description="the integrator's name")
]


class JoinTokenSpec(BaseModel):
    # Strict: a JSON body's types are the schema's (no true for 1, no "60" for 60).
    model_config = ConfigDict(extra="forbid", strict=True)
    ttl_s: Integer = Field(
        default=3600, ge=60, le=7 * 24 * 3600, description="how long it may be used (once)"
    )


class JoinTokenCreated(BaseModel):
    token: str = Field(description="the join token, shown this once")
    expires_at: datetime
    command: str = Field(description="what to run on the new machine")


class JoinRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=200)
    node_id: str = Field(pattern=NODE_ID, description="the id the new node will have")


class JoinedNats(BaseModel):
    url: str
    user: str
    password: str
    ca_pem: str | None = Field(description="the CA that signed the bus's certificate, when it speaks TLS")


class JoinedDatabase(BaseModel):
    url: str = Field(description="the node agents' login (corral_agent), without its password")
    password: str


class Joined(BaseModel):
    """Everything a node needs, shown this once (``corral node join`` writes it to files)."""

    node_id: str
    nats: JoinedNats
    database: JoinedDatabase
    node_secret: str = Field(description="the node's own secret: its agent acts for this node only")


class NodeRemoved(BaseModel):
    node_id: str
    detail: str


class BusCredentialsSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # The schema names the streams there are; the route refuses any other (422).
    streams: list[Annotated[str, WithJsonSchema({"type": "string", "enum": sorted(STREAM_NAMES)})]] = Field(
        min_length=1, max_length=3, description=f"which event streams: {', '.join(STREAM_NAMES)}"
    )


class BusCredentials(BaseModel):
    user: str
    password: str = Field(description="shown this once")
    url: str
    ca_pem: str | None
    streams: list[str] = Field(description="the JetStream streams it may read")
    consumer: str = Field(description="the one consumer name it may create and read on each stream")
    detail: str


def _join_config(settings: ApiSettings) -> node_join.JoinConfig:
    return node_join.JoinConfig(
        nats_url=settings.join_nats_url,
        nats_ca_file=settings.join_nats_ca_file,
        database_url=settings.join_database_url,
        agent_password_file=settings.join_agent_password_file,
    )


@router.post(
    "/nodes/join-tokens",
    status_code=201,
    operation_id="createJoinToken",
    response_model=JoinTokenCreated,
    responses={409: {"description": NOT_SET_UP}},
)
async def create_join_token(
    request: Request,
    principal: AuthenticatedPrincipal,
    repo: ClusterRepo,
    settings: SettingsDep,
    spec: JoinTokenSpec | None = None,
) -> JoinTokenCreated:
    """Admin: a one-time token with which a new machine joins as a node."""
    require_admin(principal, "let machines join")
    _join_config(settings).check()
    ttl = timedelta(seconds=(spec or JoinTokenSpec()).ttl_s)
    token, expires_at = await node_join.create_join_token(repo, principal.username, ttl)
    api_url = str(request.base_url).rstrip("/")
    return JoinTokenCreated(
        token=token,
        expires_at=expires_at,
        command=f"corral node join --api {api_url} --token {token} --node-id <its name>",
    )


@router.post(
    "/nodes/join",
    status_code=201,
    operation_id="joinNode",
    response_model=Joined,
    responses={
        401: {"description": "the join token is unknown, used already or expired"},
        409: {"description": NOT_SET_UP + ", or a node of this id is up already"},
        503: {"description": "the control plane cannot read what a node needs, or the database is away"},
    },
)
async def join_node(body: JoinRequest, repo: ClusterRepo, settings: SettingsDep) -> Joined:
    """A new machine becomes node ``node_id``, with the join token as its credential."""
    joined = await node_join.join(repo, body.token, body.node_id, _join_config(settings))
    return Joined.model_validate(joined)


@router.delete("/nodes/{node_id}", operation_id="removeNode", response_model=NodeRemoved)
async def remove_node(node_id: NodeId, principal: AuthenticatedPrincipal, repo: ClusterRepo) -> NodeRemoved:
    """Admin: revoke the node's credentials; it gets no more work, and its tasks are
    handled as a lost node's once its lease has run out."""
    require_admin(principal, "remove nodes")
    await node_join.remove(repo, node_id, principal.username)
    return NodeRemoved(
        node_id=node_id,
        detail="its bus and database credentials are revoked: its agent is cut off now, and its tasks are "
        "handled as a lost node's once its lease runs out; let it back with a new join token",
    )


@router.put(
    "/integrations/{name}/bus-credentials",
    operation_id="mintBusCredentials",
    response_model=BusCredentials,
)
async def mint_bus_credentials(
    name: IntegratorName,
    spec: BusCredentialsSpec,
    principal: AuthenticatedPrincipal,
    repo: ClusterRepo,
    settings: SettingsDep,
) -> BusCredentials:
    """Admin: read-only NATS credentials for an integrator (again: a new password)."""
    require_admin(principal, "mint bus credentials")
    unknown = [s for s in spec.streams if s not in STREAM_NAMES]
    if unknown:
        raise InvalidInput(f"unknown streams {unknown}; choose from {', '.join(STREAM_NAMES)}")
    config = _join_config(settings)
    streams = [STREAM_NAMES[s] for s in dict.fromkeys(spec.streams)]
    password = await node_join.mint_integrator(repo, name, streams, principal.username)
    ca_pem = config.nats_ca_file.read_text() if config.nats_ca_file else None
    user = INTEGRATOR_PREFIX + name
    return BusCredentials(
        user=user,
        password=password,
        url=config.nats_url,
        ca_pem=ca_pem,
        streams=streams,
        consumer=user,
        detail="read-only: one consumer named after the user on each stream; events are keyed by job and "
        "node, not tenant, so these see every tenant's events: for one tenant's, use webhooks or SSE",
    )


@router.delete("/integrations/{name}/bus-credentials", status_code=204, operation_id="revokeBusCredentials")
async def revoke_bus_credentials(
    name: IntegratorName, principal: AuthenticatedPrincipal, repo: ClusterRepo
) -> None:
    """Admin: the integrator's bus credentials stop working (NATS disconnects it)."""
    require_admin(principal, "revoke bus credentials")
    await node_join.revoke_integrator(repo, name)
