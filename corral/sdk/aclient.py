"""``AsyncClient``: the asyncio Corral SDK, method for method the same as ``Client``.

    from corral.sdk import AsyncClient

    async with AsyncClient() as corral:
        job = await corral.submit({"name": "hello", "tasks": [...]})
        async for event in corral.events(jobs=[job.id]):
            print(event.type)

Requests are built in ``operations.py`` (shared with ``Client``, so the two cannot
drift apart); only sending and sleeping differ. Streams (``follow_logs``, ``watch``,
``events``) are async iterators; leaving the ``async for`` early closes the connection.
One ``AsyncClient`` belongs to one event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

from corral.sdk import operations as op
from corral.sdk._base import DEFAULT_TIMEOUT_S, EVENTS_READ_TIMEOUT_S, Settings
from corral.sdk.errors import ApiError, ConnectionFailed
from corral.sdk.models import (
    Alert,
    AlertActionAccepted,
    AlertDetail,
    AlertRules,
    BusCredentials,
    Detail,
    DrainAccepted,
    DryRun,
    Event,
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
    Pending,
    ServiceInstance,
    ServicesOverview,
    Silence,
    SilenceAccepted,
    Token,
    TokenCreated,
    User,
    VirtualCluster,
    WhoAmI,
)
from corral.sdk.registry import AsyncRegistryCalls
from corral.sdk.retries import RetryPolicy
from corral.sdk.serving import AsyncServingCalls
from corral.sdk.specs import load_job_spec
from corral.sdk.sse import SseParser, reconnect_wait
from corral.sdk.webhooks import AsyncWebhookCalls

T = TypeVar("T")


class AsyncClient(AsyncRegistryCalls, AsyncServingCalls, AsyncWebhookCalls):
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int | RetryPolicy = 3,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = Settings.build(url, token, timeout_s, retries)
        self.url = self._settings.url
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=self._settings.headers,
            timeout=self._settings.timeout,
            transport=transport,
        )

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def _run(self, call: op.Call[T]) -> T:
        policy = self._settings.policy
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, json=call.body
                )
            except httpx.TransportError as exc:
                wait = policy.after_error(call.idempotent, attempt)
                if wait is None:
                    raise ConnectionFailed(self.url, exc) from exc
                await asyncio.sleep(wait)
                continue
            wait = policy.after_response(call.idempotent, attempt, response)
            if wait is not None:
                await asyncio.sleep(wait)
                continue
            if response.status_code >= 400:
                raise ApiError.from_response(response)
            return call.parse(response)

    # Jobs
    async def submit(self, spec: Mapping[str, Any]) -> Job:
        """Submit a job (Corral's spec as a mapping); it starts ``PENDING``."""
        return await self._run(op.submit_job(spec))

    async def submit_file(self, path: str | Path) -> Job:
        """Submit the job spec in a JSON or YAML file (``-``: standard input)."""
        return await self.submit(await asyncio.to_thread(load_job_spec, path))

    async def dry_run(self, spec: Mapping[str, Any]) -> DryRun:
        """Where the job would go now, or why it would wait and until when; nothing is stored."""
        return await self._run(op.dry_run(spec))

    async def list_jobs(
        self, state: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> JobPage:
        """One page of jobs, newest first (yours; every job for admins)."""
        return await self._run(op.list_jobs(state, limit, cursor))

    async def iter_jobs(self, state: str | None = None, page_size: int = 100) -> AsyncIterator[Job]:
        """Every job, page by page, for as long as the API hands out a ``next_cursor``."""
        cursor: str | None = None
        while True:
            page = await self.list_jobs(state, page_size, cursor)
            for job in page.items:
                yield job
            if not page.next_cursor or not page.items:
                return
            cursor = page.next_cursor

    async def get_job(self, job_id: str) -> Job:
        return await self._run(op.get_job(job_id))

    async def why_pending(self, job_id: str) -> Pending | None:
        """Why a pending job waits (``None`` when it does not, or before the scheduler looked)."""
        return (await self.get_job(job_id)).pending

    async def cancel(self, job_id: str) -> Job:
        """Cancel a job (repeating it is harmless); it ends ``CANCELLED`` once its tasks stop."""
        return await self._run(op.cancel_job(job_id))

    async def logs(self, job_id: str, task: str | None = None, attempt: int | None = None) -> str:
        """A task attempt's output so far (default: the first task, latest attempt)."""
        return await self._run(op.job_logs(job_id, task, attempt))

    async def follow_logs(
        self, job_id: str, task: str | None = None, attempt: int | None = None
    ) -> AsyncIterator[str]:
        """A task attempt's output as it is written, until the attempt ends. No read timeout:
        a task may be silent for hours."""
        async with self._http.stream(
            "GET",
            op.logs_path(job_id),
            params=op.logs_query(task, attempt, True),
            timeout=self._settings.streaming(None),
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                raise ApiError.from_response(response)
            async for text in response.aiter_text():
                yield text

    async def watch(self, job_id: str, poll_s: float = 1.0) -> AsyncIterator[Job]:
        """The job now, then each time it changes, ending with it finished."""
        last: tuple[Any, ...] | None = None
        while True:
            job = await self.get_job(job_id)
            seen = (job.state, job.updated_at, tuple((a.id, a.state) for a in job.attempts), job.pending)
            if seen != last:
                last = seen
                yield job
            if job.finished:
                return
            await asyncio.sleep(poll_s)

    async def wait(self, job_id: str, poll_s: float = 1.0, timeout_s: float | None = None) -> Job:
        """Block until the job is SUCCEEDED, FAILED or CANCELLED; ``TimeoutError`` after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        async for job in self.watch(job_id, poll_s):
            if job.finished:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout_s}s")
        raise AssertionError("watch ends with a finished job")  # pragma: no cover

    # Virtual clusters
    async def list_vcs(self) -> list[VirtualCluster]:
        return await self._run(op.list_vcs())

    async def get_vc(self, name: str) -> VirtualCluster:
        return await self._run(op.get_vc(name))

    async def put_vc(
        self,
        name: str,
        quota: Mapping[str, int] | None = None,
        max_gpus_per_user: int | None = None,
        description: str = "",
        interactive: bool | None = None,
    ) -> VirtualCluster:
        """Create a VC or replace its quota and limits (admin); ``warnings`` say what cannot hold.
        ``interactive``: may its jobs' owners exec into them and reach their ports (``None``: as it is)."""
        return await self._run(op.put_vc(name, quota or {}, max_gpus_per_user, description, interactive))

    async def delete_vc(self, name: str) -> None:
        """Delete a VC with no job waiting or running (admin)."""
        await self._run(op.delete_vc(name))

    # Nodes and GPUs
    async def list_nodes(self) -> list[Node]:
        return await self._run(op.list_nodes())

    async def get_node(self, node_id: str) -> NodeDetail:
        return await self._run(op.get_node(node_id))

    async def list_gpus(self, node: str | None = None) -> list[Gpu]:
        return await self._run(op.list_gpus(node))

    async def gpu_history(
        self,
        node: str | None = None,
        gpu: int | None = None,
        job: str | None = None,
        resolution_s: int = 10,
        since_s: int = 3600,
    ) -> GpuHistory:
        return await self._run(op.gpu_history(node, gpu, job, resolution_s, since_s))

    async def drain(self, node_id: str, reason: str = "") -> DrainAccepted:
        """Stop placing work on a node (admin); the monitor carries it out within moments."""
        return await self._run(op.drain(node_id, reason, True))

    async def undrain(self, node_id: str, reason: str = "") -> DrainAccepted:
        return await self._run(op.drain(node_id, reason, False))

    async def create_join_token(self, ttl_s: int = 3600) -> JoinToken:
        """A one-time token with which a machine joins as a node (admin)."""
        return await self._run(op.create_join_token(ttl_s))

    async def join(self, token: str, node_id: str) -> Joined:
        """Join this machine as node ``node_id`` with a join token (no bearer token needed)."""
        return await self._run(op.join(token, node_id))

    async def remove_node(self, node_id: str) -> NodeRemoved:
        """Revoke a node's credentials (admin); its tasks end as a lost node's."""
        return await self._run(op.remove_node(node_id))

    async def mint_bus_credentials(self, name: str, streams: Sequence[str]) -> BusCredentials:
        """Read-only NATS credentials for an integrator (admin)."""
        return await self._run(op.mint_bus_credentials(name, streams))

    async def revoke_bus_credentials(self, name: str) -> None:
        await self._run(op.revoke_bus_credentials(name))

    async def list_service_instances(self) -> list[ServiceInstance]:
        return await self._run(op.list_service_instances())

    async def services_overview(self) -> ServicesOverview:
        """Service instances, and what make up's supervisor keeps alive (its servers too)."""
        return await self._run(op.services_overview())

    # Alerts, silences, rules
    async def list_alerts(self, state: str | None = None, limit: int = 100) -> list[Alert]:
        return await self._run(op.list_alerts(state, limit))

    async def get_alert(self, alert_id: str) -> AlertDetail:
        return await self._run(op.get_alert(alert_id))

    async def acknowledge(self, alert_id: str, note: str = "") -> AlertActionAccepted:
        return await self._run(op.alert_action(alert_id, "acknowledge", note))

    async def resolve(self, alert_id: str, note: str = "") -> AlertActionAccepted:
        return await self._run(op.alert_action(alert_id, "resolve", note))

    async def list_silences(self) -> list[Silence]:
        return await self._run(op.list_silences())

    async def get_silence(self, silence_id: str) -> Silence:
        return await self._run(op.get_silence(silence_id))

    async def silence(
        self,
        matchers: Sequence[Matcher | str],
        duration_s: int | None = None,
        *,
        starts_at: datetime | None = None,
        ends_at: datetime | None = None,
        comment: str = "",
    ) -> SilenceAccepted:
        """Mute matching alerts' notifications (admin): ``duration_s`` or ``ends_at``."""
        parsed = [m if isinstance(m, Matcher) else Matcher.parse(m) for m in matchers]
        return await self._run(op.create_silence(parsed, duration_s, starts_at, ends_at, comment))

    async def expire_silence(self, silence_id: str) -> SilenceAccepted:
        return await self._run(op.expire_silence(silence_id))

    async def get_alert_rules(self) -> AlertRules:
        return await self._run(op.get_alert_rules())

    async def set_alert_rules(self, overrides: Mapping[str, Any]) -> Detail:
        return await self._run(op.set_alert_rules(overrides))

    async def reset_alert_rules(self) -> Detail:
        return await self._run(op.reset_alert_rules())

    # Users, groups, tokens
    async def whoami(self) -> WhoAmI:
        """Who this token acts as: user, role, scopes, groups, the VCs it may use."""
        return await self._run(op.whoami())

    async def list_users(self) -> list[User]:
        return await self._run(op.list_users())

    async def get_user(self, name: str) -> User:
        return await self._run(op.get_user(name))

    async def create_user(self, name: str, role: str = "user", display_name: str = "") -> User:
        return await self._run(op.create_user(name, role, display_name))

    async def set_user_role(self, name: str, role: str) -> User:
        return await self._run(op.set_user_role(name, role))

    async def delete_user(self, name: str) -> None:
        await self._run(op.delete_user(name))

    async def list_groups(self) -> list[Group]:
        return await self._run(op.list_groups())

    async def get_group(self, name: str) -> Group:
        return await self._run(op.get_group(name))

    async def create_group(self, name: str, description: str = "") -> Group:
        return await self._run(op.create_group(name, description))

    async def delete_group(self, name: str) -> None:
        await self._run(op.delete_group(name))

    async def add_group_member(self, group: str, user: str) -> Group:
        return await self._run(op.add_member(group, user))

    async def remove_group_member(self, group: str, user: str) -> None:
        await self._run(op.remove_member(group, user))

    async def list_tokens(self, user: str | None = None) -> list[Token]:
        return await self._run(op.list_tokens(user))

    async def create_token(
        self,
        name: str,
        scopes: Sequence[str] | None = None,
        expires_at: datetime | None = None,
        user: str | None = None,
    ) -> TokenCreated:
        """A new bearer token (``token`` is shown only now); ``user`` for admins only."""
        return await self._run(op.create_token(name, scopes, expires_at, user))

    async def revoke_token(self, token_id: str) -> None:
        await self._run(op.revoke_token(token_id))

    # The event stream
    async def events(
        self,
        types: Sequence[str] | None = None,
        jobs: Sequence[str] | None = None,
        virtual_clusters: Sequence[str] | None = None,
        *,
        last_event_id: str | None = None,
        max_reconnects: int = 10,
        reconnect_delay_s: float | None = None,
        read_timeout_s: float = EVENTS_READ_TIMEOUT_S,
    ) -> AsyncIterator[Event]:
        """Lifecycle events as they happen, forever. After a dropped connection (or a 503)
        it reconnects with ``Last-Event-ID``, so nothing is missed and nothing comes twice;
        it gives up after ``max_reconnects`` failures in a row. The wait between tries is
        ``reconnect_delay_s``, else what the server's ``retry:`` asks (2 s)."""
        query = op.events_query(types, jobs, virtual_clusters)
        failures, parser, last = 0, SseParser(), last_event_id
        while True:
            headers = {"Last-Event-ID": last} if last else {}
            try:
                async with self._http.stream(
                    "GET",
                    op.EVENTS_PATH,
                    params=query,
                    headers=headers,
                    timeout=self._settings.streaming(read_timeout_s),
                ) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        if response.status_code not in (429, 503) or failures >= max_reconnects:
                            raise ApiError.from_response(response)
                    else:
                        failures, parser = 0, SseParser()
                        async for line in response.aiter_lines():
                            if (event := parser.feed(line)) is not None:
                                last = event.id or last
                                yield event
            except httpx.TransportError as exc:
                if failures >= max_reconnects:
                    raise ConnectionFailed(self.url, exc) from exc
            failures += 1
            await asyncio.sleep(reconnect_wait(reconnect_delay_s, parser))
