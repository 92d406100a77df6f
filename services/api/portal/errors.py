"""Refusals as pages: the portal's routes answer errors in HTML, never problem+json.

Every portal route is a ``PortalRoute``: a refusal raised anywhere below it (a job not
found, a forged CSRF token, a broken filter, a conflict from a decision module shared
with the API) becomes a page in the portal's style with the same status and the same
words the API would use. A request htmx made (``HX-Request``) gets the message alone,
which ``portal.js`` shows in the page's notice area. Without a session the browser is
sent to sign in, and brought back afterwards.

Paths that match no route get the portal's 404 page when a browser asks for HTML, and
the API's problem document otherwise (``install_not_found_page``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.api.portal.rendering import render
from services.api.portal.session import SESSION_COOKIE, PortalUser, Sessions, SignInNeeded, sign_in_url
from services.api.problems import describe_validation_errors
from shared.errors import CorralError

log = logging.getLogger(__name__)
Model = TypeVar("Model", bound=BaseModel)

_TITLES = {
    400: "Bad request",
    401: "Sign in",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    422: "Check what you asked for",
    503: "Try again shortly",
}


async def error_page(
    request: Request, status: int, detail: str, errors: list[dict[str, str]] | None = None
) -> Response:
    title = _TITLES.get(status, "Something went wrong")
    if request.headers.get("HX-Request"):
        return render(
            request, "fragments/notice.html", None, status, title=title, detail=detail, errors=errors
        )
    user = await _signed_in_or_none(request)
    return render(
        request, "error.html", user, status, title=title, detail=detail, errors=errors, status=status
    )


async def _signed_in_or_none(request: Request) -> PortalUser | None:
    """Whoever is signed in, so an error page keeps the navigation; None for anyone else."""
    sessions: Sessions | None = getattr(request.app.state, "portal_sessions", None)
    if sessions is None or not request.cookies.get(SESSION_COOKIE):
        return None
    try:
        return await sessions.user(request, as_method="GET")
    except CorralError:
        return None


def sign_in_redirect(request: Request, exc: SignInNeeded) -> Response:
    target = sign_in_url(exc.back_to)
    if request.headers.get("HX-Request"):
        # htmx follows this itself: a live panel whose session ended takes the whole page
        # to the sign-in form rather than swapping the form into a table cell.
        return Response(status_code=204, headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


class PortalRoute(APIRoute):
    """A route whose refusals are pages (see the module's docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handle(request)
            except SignInNeeded as exc:
                return sign_in_redirect(request, exc)
            except CorralError as exc:
                return await error_page(
                    request, exc.status, exc.detail, getattr(exc, "problem_fields", {}).get("errors")
                )
            except RequestValidationError as exc:
                fields = describe_validation_errors(list(exc.errors()))
                summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
                return await error_page(
                    request, 422, f"the request does not match what this page takes: {summary}", fields
                )
            except StarletteHTTPException as exc:
                return await error_page(request, exc.status_code, str(exc.detail))

        return answer


def form_as(model: type[Model], fields: dict[str, object]) -> Model:
    """A form's fields read by the API's own request model, so a wrong field is refused
    (422) with the words the API would use for the same field in a JSON body."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


def install_not_found_page(app: FastAPI) -> None:
    """An unknown path: the portal's 404 page for a browser, the API's problem otherwise."""
    api_handler: Any = app.exception_handlers[StarletteHTTPException]

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        wants_html = "text/html" in request.headers.get("accept", "")
        if exc.status_code == 404 and wants_html and not request.url.path.startswith("/api/"):
            return await error_page(request, 404, f"there is no page at {request.url.path}")
        response: Response = await api_handler(request, exc)
        return response

    app.add_exception_handler(StarletteHTTPException, not_found)
