"""The API's OpenAPI document: what FastAPI derives from the routes, plus the truth about errors.

FastAPI documents a route's success answer and, for a route with parameters, a 422 in
its own ``HTTPValidationError`` shape. Corral answers every error as problem+json
(``problems.py``), and most statuses come from machinery a route does not see, so this
module adds them where they can happen, derived rather than listed by hand:

- 401 and 403 where the route depends on ``current_principal`` (no token, a token whose
  scopes or user do not allow the request), and the bearer scheme as its ``security``;
- 400, 413 and 415 where the operation takes a request body (unparseable, too large,
  not JSON), and 422 where it takes a body or any parameter;
- 404 where the path has a parameter: the route's own "no such thing", or the router's
  for a value that is not one path segment;
- 429 and 503 on every ``/api/`` path (the rate limit, ``rate_limit.py``; Postgres away
  or out of resources, ``database_problems.py``: every such operation reads it, if only
  to verify the token), each with its ``Retry-After``.

What only the route's code knows (a 409 for a state that forbids the request, a 422 for
a rule the schema cannot say, a 502 from a node) the route declares in its ``responses=``
with a sentence saying when; this module gives every 4xx/5xx entry the problem+json
content, keeping the route's sentence over the default one. A 405 belongs to no
operation (it answers a method the path does not have), so it is not listed per
operation; its ``Allow`` header is ``problems.py``'s.

The document is committed as ``docs/api/openapi.json`` (``make openapi`` writes it;
``tests/api/test_openapi_document.py`` fails when it is stale) so that a change to the
API shows up as a diff in review, and client authors have it without running Corral.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts

from services.api.problems import PROBLEM_MEDIA_TYPE, Problem
from services.api.tenants.auth import current_principal

_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_RETRY_AFTER = {
    "description": "seconds to wait before retrying",
    "schema": {"type": "integer", "minimum": 1},
}
_BEARER = "bearer"
_BEARER_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "a Corral token (`crl_...`): the first admin's is in `$CORRAL_HOME/admin-token`; "
    "`POST /api/v1/tokens` makes more",
}
# FastAPI's own 422 shape, replaced by the problem document everywhere.
_FASTAPI_VALIDATION = ("HTTPValidationError", "ValidationError")
# What each status means when the route says nothing more precise; the problem types
# that carry it are in parentheses (docs/problems.md).
DEFAULT_DESCRIPTIONS = {
    400: "the body could not be read: not valid JSON (malformed-json) or not decodable (bad-request)",
    401: "no valid bearer token: missing, unknown, expired or revoked (unauthorized)",
    403: "the token's scopes or its user's role do not allow this request (forbidden)",
    404: "what the path names does not exist, or not for this caller (not-found)",
    409: "the current state of what the request names does not allow it (conflict)",
    413: "the body is larger than the API accepts (too-large)",
    415: "the body is not sent as JSON (unsupported-media-type)",
    422: "a parameter or field is wrong; `errors` names each one (invalid-input)",
    429: "too many requests for this token; retry after Retry-After (rate-limited)",
    502: "a node answered, but not with what was asked (node-refused)",
    503: "Corral cannot serve this now and nothing was changed: its database is away "
    "(unavailable) or out of resources (disk-full, database-out-of-resources); retry after "
    "Retry-After",
}


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and ``GET /openapi.json``) answer the described document.
    Call it once every router is included."""
    generate: Callable[[], dict[str, Any]] = app.openapi
    described: dict[str, Any] = {}

    def openapi() -> dict[str, Any]:
        if not described:
            described.update(describe_errors(copy.deepcopy(generate()), app))
        return described

    # FastAPI's documented way to change its document: replace the method on the instance.
    app.openapi = openapi  # type: ignore[method-assign]


def describe_errors(document: dict[str, Any], app: FastAPI) -> dict[str, Any]:
    """``document`` (FastAPI's) with every operation's error answers declared."""
    # What FastAPI documents, route by route (routes in an included router come wrapped).
    dependants: dict[tuple[str, str], Dependant] = {
        (str(context.path_format), method.lower()): context.dependant
        for context in iter_route_contexts(app.routes)
        if isinstance(context.original_route, APIRoute) and context.include_in_schema
        for method in context.methods or ()
    }
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            dependant = dependants[(path, method)]
            if _authenticates(dependant):
                operation["security"] = [{_BEARER: []}]
            declared = operation.setdefault("responses", {})
            for status in sorted(_statuses(path, operation, dependant)):
                declared.setdefault(str(status), {})
            for status, response in declared.items():
                if status.isdigit() and int(status) >= 400:
                    _as_problem(int(status), response)
            operation["responses"] = dict(sorted(declared.items()))
    components = document.setdefault("components", {})
    components["securitySchemes"] = {_BEARER: _BEARER_SCHEME}
    schemas = components.setdefault("schemas", {})
    problem_schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(problem_schema.pop("$defs", {}))
    schemas["Problem"] = problem_schema
    for name in _FASTAPI_VALIDATION:
        schemas.pop(name, None)
    document["components"]["schemas"] = dict(sorted(schemas.items()))
    return document


def _statuses(path: str, operation: dict[str, Any], dependant: Dependant) -> set[int]:
    statuses: set[int] = set()
    parameters = operation.get("parameters", [])
    if _authenticates(dependant):
        statuses |= {401, 403}
    if "requestBody" in operation:
        statuses |= {400, 413, 415, 422}
    if parameters:
        statuses.add(422)
    if any(parameter["in"] == "path" for parameter in parameters):
        statuses.add(404)
    if path.startswith("/api/"):
        statuses |= {429, 503}
    return statuses


def _authenticates(dependant: Dependant) -> bool:
    return dependant.call is current_principal or any(_authenticates(d) for d in dependant.dependencies)


def _as_problem(status: int, response: dict[str, Any]) -> None:
    """Give an error answer the problem document as its content, and a description."""
    described = response.get("description")
    if not described or described == "Validation Error":  # FastAPI's placeholder for its 422
        response["description"] = DEFAULT_DESCRIPTIONS.get(status, "refused (see the problem's type)")
    response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": _PROBLEM_REF}}
    if status in (429, 503):
        # Always sent with a 429; with a 503 when the API knows how long (the database).
        response.setdefault("headers", {})["Retry-After"] = {**_RETRY_AFTER, "required": status == 429}
