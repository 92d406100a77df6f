"""The audit log: every mutating call, who made it, on what, with what outcome, from where.

One ASGI middleware writes one ``api.audit_log`` row per POST, PUT, PATCH or DELETE that
matched a route, refused ones included (401, 403, 422: an attempt is what an auditor
looks for). It records the caller (``request.state.principal``, set by
``auth.current_principal``; NULL when the token did not verify), the route *template*
(``/api/v1/jobs/{job_id}/cancel``, never a raw path), the target (the route's id
parameter, or what a create route names with ``set_audit_target``), the status and the
client address.

The row is written when the response starts, before the client sees anything, in its own
transaction right after the change's: one place records every route, so no route can
forget to. The price is a window: if the process dies between the change's commit and
the audit insert, that one row is missing. A failed audit insert (Postgres gone just
then) is logged at error level and the answer still goes out: the change is already made.

The submit, the busiest mutating call, closes that window: its one-statement path writes
the audit row in the statement that stores the job (``AuditEntry``, built from the scope
exactly as here), then says so (``audited_with_change``), and the middleware writes no
second row for that status. One round trip fewer per submit, and a job never exists
without its audit row.

Retention: every API process deletes, once an hour, the rows older than
``CORRAL_API_AUDIT_RETENTION_DAYS`` (365 by default), in batches
(``TenantRepository.forget_old_audit``); export the log first if it must be kept longer.

This is app-wide plumbing, as the other middlewares: the rows are the tenants slice's
(``tenants/repository.py`` writes them, ``tenants/routes_audit.py`` reads them), handed
in by the composition root as an ``AuditSink``, so nothing here imports a slice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from starlette.requests import Request

from shared.metrics import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Path parameters that name what a call acts on, most specific first.
_TARGET_PARAMS = ("delivery_id", "job_id", "webhook_id", "token_id", "alert_id", "silence_id", "node_id")


class Caller(Protocol):
    """Who made a call, as ``auth.current_principal`` leaves it in the request's state."""

    @property
    def username(self) -> str: ...

    @property
    def token_id(self) -> str | None: ...


class AuditSink(Protocol):
    """Where the rows go (``TenantRepository``)."""

    async def record_audit(
        self,
        username: str | None,
        token_id: str | None,
        method: str,
        route: str,
        target: str | None,
        status: int,
        client: str | None,
    ) -> None: ...


@dataclass(frozen=True)
class AuditEntry:
    """Who makes a call, how and from where: an audit row less its target and status."""

    username: str | None  # None: the token did not verify
    token_id: str | None
    method: str
    route: str  # the route's template, never a raw path
    client: str | None

    @classmethod
    def of(cls, scope: Scope) -> AuditEntry | None:
        """The entry for a call that matched a route (None: no call was made)."""
        route = getattr(scope.get("route"), "path", None)
        if route is None:
            return None  # matched no route (404/405, or refused before routing: 413)
        principal: Caller | None = (scope.get("state") or {}).get("principal")
        client = scope.get("client")
        return cls(
            principal.username if principal else None,
            principal.token_id if principal else None,
            scope["method"],
            route,
            client[0] if client else None,
        )


def audited_with_change(request: Request, status: int) -> None:
    """The route wrote this call's audit row with its change, for ``status``: the
    middleware writes none (a different status, e.g. a crash after it, still gets one)."""
    request.state.audited_status = status


def set_audit_target(request: Request, target: str) -> None:
    """Name what a call created (a new job's id), for routes whose path names nothing."""
    request.state.audit_target = target


def target_of(scope: Scope) -> str | None:
    """The route's id parameter, as sent even when it failed validation (an attempt on
    ``../etc`` is worth seeing), cut short and without control characters."""
    state = scope.get("state") or {}
    params: dict[str, object] = scope.get("path_params") or {}
    if state.get("audit_target"):
        target = str(state["audit_target"])
    elif found := [name for name in _TARGET_PARAMS if name in params]:
        target = str(params[found[0]])
    else:
        # Routes of named things: /groups/{name}/members/{username} acts on a membership.
        target = "/".join(str(params[k]) for k in ("name", "username") if k in params)
    return "".join(c if c.isprintable() else "?" for c in target[:200]) or None


class AuditLog:
    """ASGI middleware: one audit row per mutating call (see the module docstring)."""

    def __init__(self, app: ASGIApp, repo: AuditSink) -> None:
        self.app = app
        self.repo = repo

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in MUTATING:
            await self.app(scope, receive, send)
            return

        started = False

        async def send_after_audit(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                await self._record(scope, int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, send_after_audit)
        except Exception:
            # A crash is answered 500 further out (problems.py); record it here.
            if not started:
                await self._record(scope, 500)
            raise

    async def _record(self, scope: Scope, status: int) -> None:
        entry = AuditEntry.of(scope)
        if entry is None or (scope.get("state") or {}).get("audited_status") == status:
            return  # no call was made, or its row went in with its change
        try:
            await self.repo.record_audit(
                entry.username,
                entry.token_id,
                entry.method,
                entry.route,
                target_of(scope),
                status,
                entry.client,
            )
        except Exception:
            log.exception("could not write the audit row of %s %s (%s)", entry.method, entry.route, status)
