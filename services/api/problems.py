"""RFC 9457 problem+json: every error leaves the API in this one shape.

``CorralError`` subclasses map to their status; request validation errors become 400
(unparseable JSON) or 422 (well-formed but wrong) with one line per wrong field; any
other exception becomes a logged 500 that says nothing about internals. (Postgres away or
out of resources is a 503, from ``database_problems.py``.)
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.errors import CorralError

log = logging.getLogger(__name__)

PROBLEM_BASE = "https://corral.dev/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str,
    instance: str | None = None,
    **extra: Any,
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
        return problem(exc.status, exc.problem_type, exc.title, exc.detail, request.url.path, **fields)

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
        slug = {404: "not-found", 405: "method-not-allowed", 413: "too-large"}.get(
            exc.status_code, "http-error"
        )
        return problem(exc.status_code, slug, str(exc.detail), str(exc.detail), request.url.path)

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
