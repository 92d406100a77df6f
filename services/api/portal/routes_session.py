"""``/login`` and ``/logout``: a token exchanged for a session, and the session ended
(``session.py`` says how and why)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.api.portal.dependencies import PortalSessions
from services.api.portal.errors import PortalRoute
from services.api.portal.rendering import render
from services.api.portal.session import (
    CSRF_FIELD,
    SESSION_COOKIE,
    check_csrf,
    check_sign_in_token,
    new_sign_in_token,
    safe_next,
    set_session_cookie,
)
from shared.errors import Unauthorized

router = APIRouter(route_class=PortalRoute, include_in_schema=False)
# A bearer token as the API hands them out; anything longer is not one.
MAX_TOKEN_CHARS = 200


@router.get("/login", response_class=HTMLResponse)
async def sign_in_form(request: Request, next: str | None = None) -> Response:
    return _form(request, next, None, 200)


def _form(request: Request, next: str | None, error: str | None, status: int) -> Response:
    """The sign-in page, with a fresh double-submit token in its form and its cookie."""
    cookie = Response()
    token = new_sign_in_token(request, cookie)
    response = render(
        request, "login.html", None, status, next=safe_next(next), error=error, sign_in_token=token
    )
    response.headers.append("set-cookie", cookie.headers["set-cookie"])
    return response


@router.post("/login")
async def sign_in(
    request: Request,
    sessions: PortalSessions,
    sign_in_token: Annotated[str, Form(max_length=100)],
    token: Annotated[str, Form(max_length=MAX_TOKEN_CHARS)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    check_sign_in_token(request, sign_in_token)
    if not token.strip():
        return _form(
            request,
            next,
            "paste an API token (make up prints the admin's; corral token create makes one)",
            422,
        )
    try:
        secret, _principal = await sessions.sign_in(token)
    except Unauthorized as exc:
        return _form(request, next, exc.detail, 401)
    response = RedirectResponse(safe_next(next), status_code=303)
    set_session_cookie(request, response, secret, sessions.lifetime_s)
    return response


@router.post("/logout")
async def sign_out(
    request: Request,
    sessions: PortalSessions,
    csrf_token: Annotated[str | None, Form(alias=CSRF_FIELD)] = None,
) -> Response:
    # Any session may end itself, a read-only token's too (as a read, scope-wise).
    user = await sessions.user(request, as_method="GET")
    check_csrf(request, user, csrf_token)
    await sessions.sign_out(request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
