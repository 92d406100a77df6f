"""All of the API's SQL: jobs as submitted, reads for queries, tokens.

Users, groups, token management and the audit log are in ``tenant_repository.py``;
webhooks in ``webhook_repository.py``. ``vc_user`` arguments name the user whom VC
access lists apply to (None: an admin, who may use and see every VC).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from services.api.admission import ClusterShape, ShapeCache, check_can_ever_run
from services.api.audit import AuditEntry
from services.api.idempotency import IdempotencyKey
from services.api.job_pages import JobCursor
from shared.db.pool import Connection, Database
from shared.db.queries import Queries
from shared.errors import Conflict, Forbidden, InvalidInput, NotFound
from shared.events import (
    AlertActionRequested,
    AlertRulesRequested,
    Event,
    JobCancelled,
    JobCancelRequested,
    JobSubmitted,
    NodeDrainRequested,
    SilenceRequested,
)
from shared.events.alerts import (
    AlertActionRequestedData,
    AlertRulesRequestedData,
    Matcher,
    SilenceRequestedData,
)
from shared.events.jobs import JobCancelRequestedData, JobEndedData, JobSubmittedData
from shared.events.nodes import NodeDrainRequestedData
from shared.ids import JobId, new_job_id
from shared.jobs import JobSpec, JobState
from shared.outbox import append, committed_by_statement, outbox_row, statement_notify_channel
from shared.telemetry import current_traceparent

SQL = Queries(Path(__file__).parent / "sql")
SOURCE = "corral/api"


class ApiRepository:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.shapes = ShapeCache(self.cluster_shape)

    async def _record(self, event: Event, aggregate: str) -> None:
        """A request for the service that owns the entity: an event in the outbox, alone in
        its transaction (the API changes nothing of another service's)."""
        async with self.db.transaction() as conn:
            await append(conn, event, aggregate=aggregate)

    async def submit_job(
        self,
        spec: JobSpec,
        username: str,
        vc_user: str | None,
        *,
        secrets: dict[str, str] | None = None,
        idempotency: IdempotencyKey | None = None,
        secrets_from: str | None = None,
        tags: list[str] | None = None,
        audit: tuple[AuditEntry, int] | None = None,
    ) -> dict[str, Any]:
        """Store the job as PENDING and its ``job.submitted`` event, atomically.

        Refused (nothing stored) when its VC does not exist or the user may not use it, or
        no registered node could ever hold it. ``secrets`` (environment variable → value)
        are stored apart from the spec (``api.job_secrets``); ``secrets_from`` copies
        another job's (a resubmit). With ``idempotency``, a key this user already used for
        the same request returns that job instead (``replayed`` True in the answer), and
        for another request raises ``IdempotencyKeyReused``. ``audit`` (the call's entry
        and status): written with the job when the submit is one statement, and then
        ``audited`` is True in the answer (services/api/audit.py)."""
        check_can_ever_run(spec, await self.shapes.get())
        job_id: JobId = new_job_id()
        event = JobSubmitted(
            source=SOURCE,
            subject=job_id,
            data=JobSubmittedData(
                job_id=job_id,
                name=spec.name,
                user=username,
                virtual_cluster=spec.virtual_cluster,
                total_gpus=spec.total_gpus,
            ),
        )
        job_values = (
            job_id,
            spec.name,
            username,
            spec.virtual_cluster,
            spec.priority,
            spec.model_dump(mode="json"),
            spec.total_gpus,
            current_traceparent(),
            tags,
        )
        if not secrets and secrets_from is None and idempotency is None:
            # The common submit: one statement (see submit_job_at_once). No row: the VC
            # check failed; the transaction below says why (or, should the VC have
            # appeared meanwhile, submits).
            entry, status = audit if audit is not None else (None, None)
            event_row = outbox_row(event, job_id)
            channel = statement_notify_channel(SOURCE)
            row = await self.db.fetchrow(
                SQL.submit_job_at_once,
                *job_values,
                vc_user,
                *event_row,
                channel,
                *(
                    (entry.username, entry.token_id, entry.method, entry.route, status, entry.client)
                    if entry is not None
                    else (None,) * 6
                ),
            )
            if row is not None:
                if channel is None:
                    committed_by_statement([event_row])
                return {**dict(row), "replayed": False, "audited": entry is not None}
        async with self.db.transaction() as conn:
            await self._check_vc(conn, spec, vc_user)
            if idempotency is not None:
                earlier = await idempotency.claim(conn, username, job_id)
                if earlier is not None:
                    row = await conn.fetchrow(SQL.get_job, earlier)
                    assert row is not None  # the key's job: deleted with it (cascade)
                    return {**dict(row), "replayed": True, "audited": False}
            row = await conn.fetchrow(SQL.insert_job, *job_values)
            if secrets:
                await conn.execute(SQL.insert_job_secrets, job_id, list(secrets), list(secrets.values()))
            if secrets_from is not None:
                await conn.execute(SQL.copy_job_secrets, secrets_from, job_id)
            await append(conn, event, aggregate=job_id)
        if idempotency is not None:
            await idempotency.sweep(self.db)
        assert row is not None
        return {**dict(row), "replayed": False, "audited": False}

    async def check_submittable(self, spec: JobSpec, vc_user: str | None) -> None:
        """The checks of a submit, storing nothing (for dry runs)."""
        check_can_ever_run(spec, await self.shapes.get())
        async with self.db.transaction() as conn:
            await self._check_vc(conn, spec, vc_user)

    @staticmethod
    async def _check_vc(conn: Connection, spec: JobSpec, vc_user: str | None) -> None:
        """A user gets the same 403 for a VC that does not exist and for one they may not
        use: telling them apart would tell them which VCs other teams have."""
        usable = await conn.fetchval(SQL.vc_for_submit, spec.virtual_cluster, vc_user)
        if vc_user is not None and not usable:
            raise Forbidden(
                f"you may not submit to virtual cluster {spec.virtual_cluster!r}: it does not exist or"
                " none of your groups has access to it. `corral vcs` (GET /api/v1/virtual-clusters)"
                " lists those you can use; ask an admin to add one of your groups to its access list"
            )
        if usable is None:
            raise InvalidInput(
                f"virtual cluster {spec.virtual_cluster!r} does not exist; `corral vcs` (GET"
                " /api/v1/virtual-clusters) lists those you can submit to"
            )

    async def cancel_job(self, job_id: str, requested_by: str, may_cancel: Callable[[str], bool]) -> None:
        """Cancel at once if PENDING; otherwise ask the launcher to stop the tasks.

        Raises ``NotFound`` for a job the caller may not see and ``Conflict`` for one
        that already ended. Repeating a cancel is harmless.
        """
        async with self.db.transaction() as conn:
            job = await conn.fetchrow(SQL.lock_job, job_id)
            if job is None or not may_cancel(job["username"]):
                raise NotFound(f"no job with id {job_id!r}; list your jobs with GET /api/v1/jobs")
            state = JobState(job["state"])
            if state.is_terminal:
                raise Conflict(f"job {job_id} already ended {state.value}; there is nothing to cancel")
            if state is JobState.PENDING:
                await conn.execute(SQL.cancel_pending_job, job_id, requested_by)
                event: JobCancelled | JobCancelRequested = JobCancelled(
                    source=SOURCE,
                    subject=job_id,
                    data=JobEndedData(
                        job_id=job_id, generation=job["generation"], reason=f"cancelled by {requested_by}"
                    ),
                )
            elif job["cancel_requested_at"] is None:
                await conn.execute(SQL.request_cancel, job_id)
                event = JobCancelRequested(
                    source=SOURCE,
                    subject=job_id,
                    data=JobCancelRequestedData(job_id=job_id, requested_by=requested_by),
                )
            else:
                return  # already requested: the launcher is on it
            await append(conn, event, aggregate=job_id)

    async def get_job(self, job_id: str) -> dict[str, Any] | None:
        row = await self.db.fetchrow(SQL.get_job, job_id)
        return dict(row) if row else None

    async def list_jobs(
        self,
        states: list[str] | None,
        virtual_cluster: str | None,
        username: str | None,
        name: str | None,
        tags: list[str] | None,
        since: datetime | None,
        until: datetime | None,
        after: JobCursor | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        """Newest first; every filter given must hold (``tags``: all of them); ``after``:
        the jobs older than that cursor."""
        rows = await self.db.fetch(
            SQL.list_jobs,
            states,
            virtual_cluster,
            username,
            name,
            tags,
            since,
            until,
            after.created_at if after else None,
            after.job_id if after else None,
            limit,
        )
        return [dict(row) for row in rows]

    async def set_job_tags(self, job_id: str, tags: list[str]) -> list[str]:
        return list(await self.db.fetchval(SQL.set_job_tags, job_id, tags))

    async def attempts_of_job(self, job_id: str) -> list[dict[str, Any]]:
        return [dict(row) for row in await self.db.fetch(SQL.attempts_of_job, job_id)]

    async def attempt_for_logs(
        self, job_id: str, role: str, index: int, attempt_no: int | None
    ) -> dict[str, Any] | None:
        row = await self.db.fetchrow(SQL.latest_attempt_of_task, job_id, role, index, attempt_no)
        return dict(row) if row else None

    async def attempt_state(self, attempt_id: str) -> str | None:
        state = await self.db.fetchrow(SQL.attempt_state, attempt_id)
        return str(state["state"]) if state else None

    async def node_last_heard(self, node_id: str) -> dict[str, Any] | None:
        row = await self.db.fetchrow(SQL.node_last_heard, node_id)
        return dict(row) if row else None

    async def upsert_token(self, token_id: str, name: str, sha256: str, role: str, username: str) -> None:
        """A token made outside the API (the bootstrap admin's; tests'): its user gets
        ``role`` and the token every scope that role may hold, without expiry."""
        scopes = ["read", "submit", "admin"] if role == "admin" else ["read", "submit"]
        async with self.db.transaction() as conn:
            await conn.execute(SQL.upsert_user, username, role)
            await conn.execute(SQL.upsert_token, token_id, name, sha256, username, scopes)

    async def token_by_hash(self, sha256: str) -> dict[str, Any] | None:
        row = await self.db.fetchrow(SQL.token_by_hash, sha256)
        return dict(row) if row else None

    # --- nodes and GPUs (the monitor's tables, read for queries) -----------------------

    async def list_nodes(self, node_id: str | None) -> list[dict[str, Any]]:
        async with self.db.connection() as conn:
            return [dict(r) for r in await conn.fetch(SQL.list_nodes, node_id)]

    async def list_gpus(self, node_id: str | None) -> list[dict[str, Any]]:
        async with self.db.connection() as conn:
            return [dict(r) for r in await conn.fetch(SQL.list_gpus, node_id)]

    async def health_events(self, node_id: str, limit: int) -> list[dict[str, Any]]:
        async with self.db.connection() as conn:
            return [dict(r) for r in await conn.fetch(SQL.health_events, node_id, limit)]

    async def gpu_history(
        self, resolution_s: int, since_s: int, node_id: str | None, gpu: int | None, job_id: str | None
    ) -> list[dict[str, Any]]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.gpu_history, resolution_s, since_s, node_id, gpu, job_id)
        return [dict(r) for r in rows]

    async def request_drain(self, node_id: str, drain: bool, reason: str, requested_by: str) -> None:
        """Record an admin's drain or undrain as an event; the monitor carries it out."""
        event = NodeDrainRequested(
            source=SOURCE,
            subject=node_id,
            data=NodeDrainRequestedData(
                node_id=node_id, drain=drain, reason=reason, requested_by=requested_by
            ),
        )
        await self._record(event, node_id)

    # --- alerts (the alerter's tables, read for queries) -----------------------------

    async def list_alerts(
        self, state: str | None, username: str | None, alert_id: str | None, limit: int
    ) -> list[dict[str, Any]]:
        async with self.db.connection() as conn:
            return [dict(r) for r in await conn.fetch(SQL.list_alerts, state, username, alert_id, limit)]

    async def alert_transitions(self, alert_id: str) -> list[dict[str, Any]]:
        async with self.db.connection() as conn:
            return [dict(r) for r in await conn.fetch(SQL.alert_transitions, alert_id)]

    async def request_alert_action(
        self, alert_id: str, action: Literal["acknowledge", "resolve"], by: str, note: str
    ) -> None:
        """Record an acknowledge or resolve as an event; the alerter carries it out."""
        event = AlertActionRequested(
            source=SOURCE,
            subject=alert_id,
            data=AlertActionRequestedData(alert_id=alert_id, action=action, by=by, note=note),
        )
        await self._record(event, alert_id)

    async def list_silences(self, silence_id: str | None) -> list[dict[str, Any]]:
        async with self.db.connection() as conn:
            return [dict(r) for r in await conn.fetch(SQL.list_silences, silence_id)]

    async def list_service_instances(self) -> list[dict[str, Any]]:
        return [dict(r) for r in await self.db.fetch(SQL.list_service_instances)]

    async def alert_rules(self) -> dict[str, Any]:
        row = await self.db.fetchrow(SQL.alert_rules)
        assert row is not None  # one row, always
        return dict(row)

    async def request_alert_rules(
        self, action: Literal["set", "clear"], overrides: dict[str, Any], by: str
    ) -> None:
        """Record a change to the alert rules as an event; the alerter applies it."""
        event = AlertRulesRequested(
            source=SOURCE,
            subject="alert-rules",
            data=AlertRulesRequestedData(action=action, by=by, overrides=overrides),
        )
        await self._record(event, "alert-rules")

    async def request_silence(
        self,
        silence_id: str,
        action: Literal["create", "expire"],
        by: str,
        matchers: list[Matcher],
        starts_at: datetime | None,
        ends_at: datetime | None,
        comment: str,
    ) -> None:
        """Record a silence's creation or early end as an event; the alerter applies it."""
        event = SilenceRequested(
            source=SOURCE,
            subject=silence_id,
            data=SilenceRequestedData(
                silence_id=silence_id,
                action=action,
                by=by,
                matchers=matchers,
                starts_at=starts_at,
                ends_at=ends_at,
                comment=comment,
            ),
        )
        await self._record(event, silence_id)

    # --- virtual clusters (the API's own table) -----------------------------------------

    async def cluster_shape(self) -> ClusterShape:
        rows = await self.db.fetch(SQL.cluster_shape)
        return ClusterShape.of((r["gpus"], r["model"], r["cpus"], r["memory_mb"]) for r in rows)

    async def list_vcs(self, name: str | None, vc_user: str | None) -> list[dict[str, Any]]:
        """Every VC (or one), as far as ``vc_user`` may see them."""
        return [dict(row) for row in await self.db.fetch(SQL.list_vcs, name, vc_user)]

    async def quota_totals(self, excluding: str) -> dict[str, int]:
        return {row["gpu_type"]: int(row["gpus"]) for row in await self.db.fetch(SQL.quota_totals, excluding)}

    async def put_vc(
        self,
        name: str,
        description: str,
        quota: dict[str, int],
        max_gpus_per_user: int | None,
        by: str,
        allowed: list[str] | None = None,
        set_access: bool = False,
    ) -> bool:
        """Create or replace the VC's definition; True when it is new. With ``set_access``
        its access list becomes ``allowed`` (None: open to every user); without, the list
        is kept (a new VC is open). Every group named must exist (``InvalidInput``)."""
        async with self.db.transaction() as conn:
            if allowed:
                found = {r["name"] for r in await conn.fetch(SQL.lock_groups, allowed)}
                if missing := sorted(set(allowed) - found):
                    raise InvalidInput(
                        f"no group named {', '.join(missing)}; create it first (POST /api/v1/groups)"
                    )
            created = await conn.fetchval(
                SQL.upsert_vc, name, description, quota, max_gpus_per_user, by, allowed, set_access
            )
        return bool(created)

    async def delete_vc(self, name: str) -> None:
        """Delete a VC with no job waiting or running (``Conflict`` otherwise)."""
        async with self.db.transaction() as conn:
            if await conn.fetchval(SQL.lock_vc, name) is None:
                raise NotFound(f"no virtual cluster {name!r}; list them with GET /api/v1/virtual-clusters")
            live = await conn.fetchval(SQL.vc_live_jobs, name)
            if live:
                raise Conflict(
                    f"virtual cluster {name} still has {live} job(s) waiting or running; cancel them or"
                    " let them end, then delete it"
                )
            await conn.execute(SQL.delete_vc, name)
