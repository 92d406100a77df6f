"""Every API operation as data: method, path, query, body, how to read the answer, and
whether it may be retried.

``Client`` and ``AsyncClient`` differ only in how they send a request (and sleep between
retries), so each of their methods is one line that builds a ``Call`` here and runs it.
Keeping the paths and bodies in one place means the sync and async clients cannot drift
apart, and a test of one exercises the other's requests too.

``idempotent`` says a call can be sent twice with the effect of once: reads, ``PUT``,
``DELETE``, and the ``POST``s the API documents as harmless to repeat (cancel, drain,
undrain). Only those are retried after a dropped connection or a 503/429, because a
``POST`` that reached the server before the connection dropped may have happened.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from corral.sdk.models import (
    Alert,
    AlertActionAccepted,
    AlertDetail,
    AlertRules,
    BusCredentials,
    Delivery,
    Detail,
    DrainAccepted,
    DryRun,
    Gpu,
    GpuHistory,
    Group,
    Job,
    JobPage,
    Joined,
    JoinToken,
    Matcher,
    Node,
    NodeDetail,
    NodeRemoved,
    RedeliveryAccepted,
    SecretRotated,
    ServiceInstance,
    ServicesOverview,
    Silence,
    SilenceAccepted,
    Token,
    TokenCreated,
    User,
    VirtualCluster,
    Webhook,
    WebhookCreated,
    WhoAmI,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Params = dict[str, str | int | list[str]]


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Params = field(default_factory=dict)
    body: Any = None
    idempotent: bool = False


_WARNING_RE = re.compile(r'^\d{3} \S+ "(.*)"$')


def _one(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.model_validate_json(response.content)


def _items(model: type[M]) -> Callable[[httpx.Response], list[M]]:
    return lambda response: [model.model_validate(item) for item in response.json()["items"]]


def _nothing(_: httpx.Response) -> None:
    return None


def _text(response: httpx.Response) -> str:
    return response.text


def _seg(value: str | int) -> str:
    """One path segment, escaped: an id can never reach another path (``../``)."""
    return quote(str(value), safe="")


def _query(**values: str | int | Sequence[str] | None) -> Params:
    return {
        k: (list(v) if not isinstance(v, str | int) else v) for k, v in values.items() if v not in (None, [])
    }


def _get(path: str, parse: Callable[[httpx.Response], T], **query: Any) -> Call[T]:
    return Call("GET", path, parse, _query(**query), idempotent=True)


# Jobs
def _warned(response: httpx.Response) -> Job:
    """The submitted job, with the API's ``Warning: 299 - "text"`` headers as its warnings."""
    job = Job.model_validate_json(response.content)
    texts = [_WARNING_RE.sub(r"\1", value) for value in response.headers.get_list("warning")]
    return job.with_warnings(texts)


def submit_job(spec: Mapping[str, Any]) -> Call[Job]:
    return Call("POST", "/api/v1/jobs", _warned, body=dict(spec))


def dry_run(spec: Mapping[str, Any]) -> Call[DryRun]:
    # Nothing is stored: asking twice is asking twice.
    return Call("POST", "/api/v1/jobs/dry-run", _one(DryRun), body=dict(spec), idempotent=True)


def list_jobs(state: str | None, limit: int, cursor: str | None) -> Call[JobPage]:
    return _get("/api/v1/jobs", _one(JobPage), state=state, limit=limit, cursor=cursor)


def get_job(job_id: str) -> Call[Job]:
    return _get(f"/api/v1/jobs/{_seg(job_id)}", _one(Job))


def cancel_job(job_id: str) -> Call[Job]:
    # The API documents a repeated cancel as harmless.
    return Call("POST", f"/api/v1/jobs/{_seg(job_id)}/cancel", _one(Job), idempotent=True)


def logs_path(job_id: str) -> str:
    return f"/api/v1/jobs/{_seg(job_id)}/logs"


def logs_query(task: str | None, attempt: int | None, follow: bool) -> Params:
    return _query(task=task, attempt=attempt, follow="true" if follow else None)


def job_logs(job_id: str, task: str | None, attempt: int | None) -> Call[str]:
    return Call("GET", logs_path(job_id), _text, logs_query(task, attempt, False), idempotent=True)


# Virtual clusters
def list_vcs() -> Call[list[VirtualCluster]]:
    return _get("/api/v1/virtual-clusters", _items(VirtualCluster))


def get_vc(name: str) -> Call[VirtualCluster]:
    return _get(f"/api/v1/virtual-clusters/{_seg(name)}", _one(VirtualCluster))


def put_vc(
    name: str,
    quota: Mapping[str, int],
    max_gpus_per_user: int | None,
    description: str,
    interactive: bool | None = None,
) -> Call[VirtualCluster]:
    body: dict[str, Any] = {
        "quota": dict(quota),
        "max_gpus_per_user": max_gpus_per_user,
        "description": description,
    }
    if interactive is not None:  # left out, the VC keeps its setting
        body["interactive"] = interactive
    return Call(
        "PUT", f"/api/v1/virtual-clusters/{_seg(name)}", _one(VirtualCluster), body=body, idempotent=True
    )


def delete_vc(name: str) -> Call[None]:
    return Call("DELETE", f"/api/v1/virtual-clusters/{_seg(name)}", _nothing, idempotent=True)


# Nodes and GPUs
def list_nodes() -> Call[list[Node]]:
    return _get("/api/v1/nodes", _items(Node))


def get_node(node_id: str) -> Call[NodeDetail]:
    return _get(f"/api/v1/nodes/{_seg(node_id)}", _one(NodeDetail))


def list_gpus(node: str | None) -> Call[list[Gpu]]:
    return _get("/api/v1/gpus", _items(Gpu), node=node)


def gpu_history(
    node: str | None, gpu: int | None, job: str | None, resolution_s: int, since_s: int
) -> Call[GpuHistory]:
    return _get(
        "/api/v1/gpu-history",
        _one(GpuHistory),
        node=node,
        gpu=gpu,
        job=job,
        resolution_s=resolution_s,
        since_s=since_s,
    )


def drain(node_id: str, reason: str, on: bool) -> Call[DrainAccepted]:
    # A drain (or undrain) asked twice leaves the node as asked once.
    verb = "drain" if on else "undrain"
    path = f"/api/v1/nodes/{_seg(node_id)}/{verb}"
    return Call("POST", path, _one(DrainAccepted), body={"reason": reason}, idempotent=True)


def create_join_token(ttl_s: int) -> Call[JoinToken]:
    return Call("POST", "/api/v1/nodes/join-tokens", _one(JoinToken), body={"ttl_s": ttl_s})


def join(token: str, node_id: str) -> Call[Joined]:
    # Never sent twice: the token is good once, and a retry would find it spent.
    return Call("POST", "/api/v1/nodes/join", _one(Joined), body={"token": token, "node_id": node_id})


def remove_node(node_id: str) -> Call[NodeRemoved]:
    return Call("DELETE", f"/api/v1/nodes/{_seg(node_id)}", _one(NodeRemoved), idempotent=True)


def mint_bus_credentials(name: str, streams: Sequence[str]) -> Call[BusCredentials]:
    path = f"/api/v1/integrations/{_seg(name)}/bus-credentials"
    return Call("PUT", path, _one(BusCredentials), body={"streams": list(streams)})


def revoke_bus_credentials(name: str) -> Call[None]:
    return Call("DELETE", f"/api/v1/integrations/{_seg(name)}/bus-credentials", _nothing, idempotent=True)


def list_service_instances() -> Call[list[ServiceInstance]]:
    return _get("/api/v1/service-instances", _items(ServiceInstance))


def services_overview() -> Call[ServicesOverview]:
    return _get("/api/v1/service-instances", _one(ServicesOverview))


# Alerts, silences, rules
def list_alerts(state: str | None, limit: int) -> Call[list[Alert]]:
    return _get("/api/v1/alerts", _items(Alert), state=state, limit=limit)


def get_alert(alert_id: str) -> Call[AlertDetail]:
    return _get(f"/api/v1/alerts/{_seg(alert_id)}", _one(AlertDetail))


def alert_action(alert_id: str, action: str, note: str) -> Call[AlertActionAccepted]:
    # Not retried: if the first went through, the second is a 409 (already moved on).
    path = f"/api/v1/alerts/{_seg(alert_id)}/{action}"
    return Call("POST", path, _one(AlertActionAccepted), body={"note": note})


def list_silences() -> Call[list[Silence]]:
    return _get("/api/v1/silences", _items(Silence))


def get_silence(silence_id: str) -> Call[Silence]:
    return _get(f"/api/v1/silences/{_seg(silence_id)}", _one(Silence))


def create_silence(
    matchers: Sequence[Matcher],
    duration_s: int | None,
    starts_at: datetime | None,
    ends_at: datetime | None,
    comment: str,
) -> Call[SilenceAccepted]:
    body: dict[str, Any] = {"matchers": [m.model_dump() for m in matchers], "comment": comment}
    if duration_s is not None:
        body["duration_s"] = duration_s
    if starts_at is not None:
        body["starts_at"] = starts_at.isoformat()
    if ends_at is not None:
        body["ends_at"] = ends_at.isoformat()
    return Call("POST", "/api/v1/silences", _one(SilenceAccepted), body=body)


def expire_silence(silence_id: str) -> Call[SilenceAccepted]:
    return Call("DELETE", f"/api/v1/silences/{_seg(silence_id)}", _one(SilenceAccepted), idempotent=True)


def get_alert_rules() -> Call[AlertRules]:
    return _get("/api/v1/alert-rules", _one(AlertRules))


def set_alert_rules(overrides: Mapping[str, Any]) -> Call[Detail]:
    return Call("PUT", "/api/v1/alert-rules", _one(Detail), body=dict(overrides), idempotent=True)


def reset_alert_rules() -> Call[Detail]:
    return Call("DELETE", "/api/v1/alert-rules", _one(Detail), idempotent=True)


# Webhooks
def list_webhooks() -> Call[list[Webhook]]:
    return _get("/api/v1/webhooks", _items(Webhook))


def get_webhook(webhook_id: str) -> Call[Webhook]:
    return _get(f"/api/v1/webhooks/{_seg(webhook_id)}", _one(Webhook))


def create_webhook(
    url: str, event_types: Sequence[str], virtual_cluster: str | None, description: str
) -> Call[WebhookCreated]:
    body = {
        "url": url,
        "event_types": list(event_types),
        "virtual_cluster": virtual_cluster,
        "description": description,
    }
    return Call("POST", "/api/v1/webhooks", _one(WebhookCreated), body=body)


def delete_webhook(webhook_id: str) -> Call[None]:
    return Call("DELETE", f"/api/v1/webhooks/{_seg(webhook_id)}", _nothing, idempotent=True)


def rotate_webhook_secret(webhook_id: str, overlap_s: float | None) -> Call[SecretRotated]:
    body = {} if overlap_s is None else {"overlap_s": overlap_s}
    return Call("POST", f"/api/v1/webhooks/{_seg(webhook_id)}/rotate-secret", _one(SecretRotated), body=body)


def list_deliveries(webhook_id: str, state: str | None, limit: int) -> Call[list[Delivery]]:
    return _get(f"/api/v1/webhooks/{_seg(webhook_id)}/deliveries", _items(Delivery), state=state, limit=limit)


def redeliver(webhook_id: str, delivery_id: int) -> Call[RedeliveryAccepted]:
    path = f"/api/v1/webhooks/{_seg(webhook_id)}/deliveries/{_seg(delivery_id)}/redeliver"
    return Call("POST", path, _one(RedeliveryAccepted))


# Users, groups, tokens
def whoami() -> Call[WhoAmI]:
    return _get("/api/v1/whoami", _one(WhoAmI))


def list_users() -> Call[list[User]]:
    return _get("/api/v1/users", _items(User))


def get_user(name: str) -> Call[User]:
    return _get(f"/api/v1/users/{_seg(name)}", _one(User))


def create_user(name: str, role: str, display_name: str) -> Call[User]:
    body = {"name": name, "role": role, "display_name": display_name}
    return Call("POST", "/api/v1/users", _one(User), body=body)


def set_user_role(name: str, role: str) -> Call[User]:
    return Call("PATCH", f"/api/v1/users/{_seg(name)}", _one(User), body={"role": role}, idempotent=True)


def delete_user(name: str) -> Call[None]:
    return Call("DELETE", f"/api/v1/users/{_seg(name)}", _nothing, idempotent=True)


def list_groups() -> Call[list[Group]]:
    return _get("/api/v1/groups", _items(Group))


def get_group(name: str) -> Call[Group]:
    return _get(f"/api/v1/groups/{_seg(name)}", _one(Group))


def create_group(name: str, description: str) -> Call[Group]:
    return Call("POST", "/api/v1/groups", _one(Group), body={"name": name, "description": description})


def delete_group(name: str) -> Call[None]:
    return Call("DELETE", f"/api/v1/groups/{_seg(name)}", _nothing, idempotent=True)


def add_member(group: str, user: str) -> Call[Group]:
    path = f"/api/v1/groups/{_seg(group)}/members/{_seg(user)}"
    return Call("PUT", path, _one(Group), idempotent=True)


def remove_member(group: str, user: str) -> Call[None]:
    path = f"/api/v1/groups/{_seg(group)}/members/{_seg(user)}"
    return Call("DELETE", path, _nothing, idempotent=True)


def list_tokens(user: str | None) -> Call[list[Token]]:
    return _get("/api/v1/tokens", _items(Token), user=user)


def create_token(
    name: str, scopes: Sequence[str] | None, expires_at: datetime | None, user: str | None
) -> Call[TokenCreated]:
    body: dict[str, Any] = {"name": name}
    if scopes:
        body["scopes"] = list(scopes)
    if expires_at is not None:
        body["expires_at"] = expires_at.isoformat()
    if user is not None:
        body["user"] = user
    return Call("POST", "/api/v1/tokens", _one(TokenCreated), body=body)


def revoke_token(token_id: str) -> Call[None]:
    return Call("DELETE", f"/api/v1/tokens/{_seg(token_id)}", _nothing, idempotent=True)


# The event stream
EVENTS_PATH = "/api/v1/events"


def events_query(
    types: Sequence[str] | None, jobs: Sequence[str] | None, virtual_clusters: Sequence[str] | None
) -> Params:
    return _query(type=types, job=jobs, virtual_cluster=virtual_clusters)
