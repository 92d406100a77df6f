"""RFC 9457 problem+json: every error leaves the API in this one shape.

``CorralError`` subclasses map to their status; request validation errors become 400
(unparseable JSON) or 422 (well-formed but wrong) with one line per wrong field; any
other exception becomes a logged 500 that says nothing about internals. (Postgres away or
out of resources is a 503, from ``database_problems.py``.)

Problem types. Every problem's ``type`` is one of ``ProblemSlug``, written as the
relative URI ``/docs/problems/<slug>``. RFC 9457 resolves a relative ``type`` against the
request's URL, so it leads back to the API that answered, which serves that type's
section of ``docs/problems.md`` there (``docs_pages.py``): what it means and what to do.
A relative reference needs no setting saying where the API is, and a client compares
the same string whatever host it called. ``ProblemSlug`` is the registry: ``problem()``
takes nothing else (mypy holds every direct answer to it), and
``tests/api/test_problem_types.py`` holds the ``CorralError`` subclasses to it and it to
the page.

405. Starlette refuses a method with the ``Allow`` of the first route whose path
matched, but a path's methods are often spread over several routes (``GET`` and
``POST /api/v1/jobs``), so the answer lists the methods of every route that matches the
path most precisely (``allowed_methods``), as RFC 9110 asks.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, get_args

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.errors import CorralError

log = logging.getLogger(__name__)

PROBLEM_BASE = "/docs/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"

ProblemSlug = Literal[
    "bad-request",
    "conflict",
    "database-out-of-resources",
    "disk-full",
    "forbidden",
    "http-error",
    "idempotency-key-reused",
    "internal",
    "invalid-input",
    "malformed-json",
    "malformed-yaml",
    "method-not-allowed",
    "node-not-answering",
    "node-refused",
    "not-found",
    "permanent",
    "rate-limited",
    "too-large",
    "unauthorized",
    "unavailable",
    "unsupported-media-type",
]
PROBLEM_TYPES: frozenset[str] = frozenset(get_args(ProblemSlug))

# Starlette's own refusals (routing, body parsing) by status; any other is ``http-error``.
_HTTP_SLUGS: dict[int, ProblemSlug] = {
    400: "bad-request",
    404: "not-found",
    405: "method-not-allowed",
    413: "too-large",
}


class FieldError(BaseModel):
    """One wrong field of a refused request."""

    field: str = Field(description="where: `body.tasks.0.resources.gpus`, `query.limit`, `path.job_id`")
    message: str = Field(description="what is wrong with it and, where it can, what to send instead")


class Problem(BaseModel):
    """An RFC 9457 problem document: how every error is answered (``application/problem+json``)."""

    # Some problems carry members of their own (``errors``; a 409 may name what it
    # conflicts with); a client ignores those it does not know.
    model_config = ConfigDict(extra="allow")

    type: str = Field(
        description="which problem: `/docs/problems/<slug>`, relative to the request's URL, where "
        "the API serves what it means and what to do"
    )
    title: str = Field(description="the problem type's short, human-readable summary")
    status: int = Field(description="the HTTP status of this answer")
    detail: str = Field(description="what went wrong in this request, and what to do about it")
    instance: str | None = Field(default=None, description="the path of the request that failed")
    errors: list[FieldError] | None = Field(
        default=None, description="one entry per wrong field (422 invalid-input)"
    )


def problem(
    status: int,
    slug: ProblemSlug,
    title: str,
    detail: str,
    instance: str | None = None,
    **extra: Any,
) -> JSONResponse:
    return _answer(status, slug, title, detail, instance, **extra)


def _answer(
    status: int, slug: str, title: str, detail: str, instance: str | None = None, **extra: Any
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + slug,
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_MEDIA_TYPE)


def allowed_methods(request: Request) -> list[str]:
    """The methods served at the request's path, by the routes whose template names it
    most precisely: ``/api/v1/nodes/join`` is ``POST`` there, although
    ``GET /api/v1/nodes/{node_id}`` would also take it as a node id."""
    by_parameters: dict[int, set[str]] = {}
    # FastAPI wraps the routes of an included router; this walks them all, prefixed.
    for route in iter_route_contexts(request.app.routes):
        regex = getattr(route, "path_regex", None)
        if regex is not None and route.methods and regex.match(request.scope["path"]):
            by_parameters.setdefault(len(route.param_convertors), set()).update(route.methods)
    return sorted(by_parameters[min(by_parameters)]) if by_parameters else []


def _field_path(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


# Fields other platforms' specs use to ask for privileges: a Corral job cannot, so their
# error says why rather than only that they are unknown.
PRIVILEGE_FIELDS = frozenset(
    {
        "uid", "gid", "user", "group", "run_as", "runAsUser", "runAsGroup", "privileged",
        "capabilities", "cap_add", "securityContext", "security_context", "mounts", "volumes",
        "volumeMounts", "devices", "device", "hostPath", "host_path", "hostNetwork", "host_network",
        "hostPID", "hostIPC",
    }
)  # fmt: skip
PRIVILEGE_MESSAGE = (
    "a job cannot choose its uid, capabilities, mounts or devices: every task runs in "
    "Corral's sandbox (README: Security model); remove this field"
)


def describe_validation_errors(errors: list[dict[str, Any]]) -> list[dict[str, str]]:
    described = []
    for error in errors:
        message = error.get("msg", "invalid")
        location = tuple(error.get("loc", ()))
        if error.get("type") == "extra_forbidden" and location and location[-1] in PRIVILEGE_FIELDS:
            message = PRIVILEGE_MESSAGE
        elif error.get("type") == "extra_forbidden":
            message = "unknown field; remove it or check its spelling"
        elif error.get("type") == "missing":
            message = "required field is missing"
        described.append({"field": _field_path(location), "message": message})
    return described


def install_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(CorralError)
    async def corral_error(request: Request, exc: CorralError) -> JSONResponse:
        # Some errors carry more than a sentence, e.g. ``errors``: one entry per wrong field.
        fields: dict[str, Any] = getattr(exc, "problem_fields", {})
        return _answer(exc.status, exc.problem_type, exc.title, exc.detail, request.url.path, **fields)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(error.get("type") == "json_invalid" for error in errors):
            position = next(
                (e.get("ctx", {}).get("error", "") for e in errors if e.get("type") == "json_invalid"),
                "",
            )
            return problem(
                400,
                "malformed-json",
                "Malformed JSON",
                f"the request body is not valid JSON ({position}); send a JSON object",
                request.url.path,
            )
        content_type = request.headers.get("content-type", "")
        body_not_parsed = any(tuple(e.get("loc", ())) == ("body",) for e in errors)
        if body_not_parsed and request.method in ("POST", "PUT", "PATCH") and "json" not in content_type:
            return problem(
                415,
                "unsupported-media-type",
                "Unsupported media type",
                f"the body was sent as {content_type or 'no content type'!r}; send a JSON object "
                "with 'Content-Type: application/json'",
                request.url.path,
            )
        fields = describe_validation_errors(errors)
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
        return problem(
            422,
            "invalid-input",
            "Invalid input",
            f"the request does not match the schema: {summary}",
            request.url.path,
            errors=fields,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 405:
            allow = ", ".join(allowed_methods(request))
            response = problem(
                405,
                "method-not-allowed",
                "Method not allowed",
                f"{request.method} is not served at this path; it answers {allow}",
                request.url.path,
            )
            response.headers["Allow"] = allow
            return response
        slug = _HTTP_SLUGS.get(exc.status_code, "http-error")
        response = problem(exc.status_code, slug, str(exc.detail), str(exc.detail), request.url.path)
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(Exception)
    async def unexpected(request: Request, _exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(
            500,
            "internal",
            "Internal error",
            "Corral hit an unexpected error; it has been logged. Retry, and report it if it persists.",
            request.url.path,
        )
