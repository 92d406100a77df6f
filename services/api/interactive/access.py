"""Who may go into a task: the caller, by bearer token or portal cookie, and the rules.

A shell in a task is the task owner's power, so a session goes only into one's own job
(an admin's: any job), needs a token that carries the ``exec`` scope (``tenants/auth.py``:
outside the read < submit < admin ladder, held only when asked for, or with ``admin``),
and is refused while the job's virtual cluster has ``interactive`` off. Someone else's
job is "not found", as everywhere in the API, so its existence does not leak.

Asking for a session is an API call like any other (a bearer token, ``submit`` for its
method, plus ``exec``). A session's WebSocket and the proxy verify the caller themselves
(``caller_of``): a bearer token, or the portal's session cookie (a browser following a
proxy link from the job's page). Through the cookie an admin is only ever the job's
owner: a proxied page is the task's own HTML served from the API's origin, and its script
runs with whatever the browser's cookie carries, so an admin's cookie must not open other
users' tasks (an admin uses a token instead).

``credential_sha256`` identifies the credential itself (the SHA-256 of the token, or of
the cookie's secret): a session's WebSocket must come with the very credential that
asked for the session.

The portal's sessions reach this slice through the composition root
(``app.state.portal_sessions``) as a ``CookieSessions``: a slice does not import the
portal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from starlette.requests import HTTPConnection, Request

from services.api.interactive.repository import SessionJob
from services.api.tenants.auth import Principal, hash_token, principal_of_bearer, require_scope
from shared.errors import Forbidden, NotFound, Unauthorized

# The portal's cookie (services/api/portal/session.py SESSION_COOKIE); every cookie named
# corral_* is Corral's own, never passed on to a task (proxy.py).
PORTAL_COOKIE = "corral_session"
PORTAL_TOKEN_ID = "portal"  # noqa: S105  # what the audit says instead of a token id


class PortalUser(Protocol):
    @property
    def principal(self) -> Principal: ...


class CookieSessions(Protocol):
    """The portal's sign-in sessions (``portal.session.Sessions``)."""

    async def user(self, request: Request, as_method: str | None = None) -> PortalUser: ...


@dataclass(frozen=True)
class Caller:
    principal: Principal
    credential_sha256: str
    token_id: str  # the token's id, or 'portal'
    by_cookie: bool

    @property
    def username(self) -> str:
        return self.principal.username

    @property
    def acts_as_admin(self) -> bool:
        return self.principal.is_admin and not self.by_cookie


async def caller_of(conn: HTTPConnection, cookies: CookieSessions | None) -> Caller:
    """The verified caller of a request or a WebSocket: its bearer token if it sends one,
    else its portal session. ``Unauthorized`` when neither holds. The caller is left in
    ``conn.state.principal`` for the audit log."""
    scheme, _, token = conn.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        principal, digest = await principal_of_bearer(conn, token)
        conn.state.principal = principal
        return Caller(principal, digest, principal.token_id or "", by_cookie=False)
    secret = conn.cookies.get(PORTAL_COOKIE, "")
    if not secret or cookies is None:
        raise Unauthorized(
            "missing bearer token: send 'Authorization: Bearer <token>', or sign in to the portal first"
        )
    # The portal's check, on a plain request of this connection (a WebSocket's scope is
    # read the same way: its URL, cookies and state).
    user = await cookies.user(Request({**conn.scope, "type": "http", "method": "GET"}), as_method="GET")
    conn.state.principal = user.principal
    return Caller(user.principal, hash_token(secret), PORTAL_TOKEN_ID, by_cookie=True)


def check_may_enter(caller: Caller, job: SessionJob | None, job_id: str) -> SessionJob:
    """The job, if ``caller`` may open a session into it: 404 for one unknown or not theirs,
    403 without the ``exec`` scope or with the job's VC switched off."""
    if job is None or not (caller.acts_as_admin or job.username == caller.username):
        raise NotFound(f"no job with id {job_id!r}; list your jobs with GET /api/v1/jobs")
    require_scope(caller.principal, "exec", "a shell, a port or a page inside a task")
    if not job.interactive:
        raise Forbidden(
            f"interactive access (exec, port-forward, proxy) is turned off for virtual cluster"
            f" {job.virtual_cluster}; an admin may turn it on (PUT /api/v1/virtual-clusters/"
            f'{job.virtual_cluster} with "interactive": true)'
        )
    return job
