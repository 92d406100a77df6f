"""The OpenAPI document: committed as served, and truthful about errors (services/api/openapi.py).

How far the answers agree with it is ``test_schemathesis.py``'s to find; these hold the
document itself: the committed copy current, every error answer a problem, the token
asked for where the API asks for one, and the 405 that no operation lists carrying the
``Allow`` RFC 9110 requires.
"""

from __future__ import annotations

import difflib
from typing import Any

import httpx

from services.api.problems import PROBLEM_MEDIA_TYPE
from tests.openapi_snapshot import REGENERATE, ROOT, SNAPSHOT, api_document, render

PROBLEM = {"schema": {"$ref": "#/components/schemas/Problem"}}


def _operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["operationId"]: op for path in document["paths"].values() for op in path.values()}


def test_the_committed_document_is_current() -> None:
    served, committed = render(api_document()), SNAPSHOT.read_text()
    diff = difflib.unified_diff(
        committed.splitlines(), served.splitlines(), "committed", "served", lineterm="", n=2
    )
    assert committed == served, f"{SNAPSHOT.relative_to(ROOT)} is stale: run {REGENERATE}\n" + "\n".join(
        list(diff)[:80]
    )


def test_every_error_answer_is_a_problem_document() -> None:
    document = api_document()
    for operation_id, operation in _operations(document).items():
        errors = {s: r for s, r in operation["responses"].items() if int(s) >= 400}
        assert {"422", "429", "503"} & errors.keys(), operation_id
        for status, response in errors.items():
            assert response["content"] == {PROBLEM_MEDIA_TYPE: PROBLEM}, (operation_id, status)
            assert response["description"], (operation_id, status)
    schemas = document["components"]["schemas"]
    assert {"type", "title", "status", "detail"} <= set(schemas["Problem"]["required"])
    assert "HTTPValidationError" not in schemas, "FastAPI's own 422 shape is never answered"


def test_the_token_is_asked_for_where_the_api_asks_for_it() -> None:
    operations = _operations(api_document())
    # Joining as a node takes a one-time join token in the body, not a bearer token.
    assert "security" not in operations["joinNode"]
    assert "401" in operations["joinNode"]["responses"]  # a join token that is no good
    for operation_id, operation in operations.items():
        if operation_id == "joinNode":
            continue
        assert operation["security"] == [{"bearer": []}], operation_id
        assert {"401", "403"} <= operation["responses"].keys(), operation_id


def test_business_rules_are_documented_where_they_refuse() -> None:
    operations = _operations(api_document())
    for operation_id, status, rule in [
        ("deleteUser", "409", "their own user"),
        ("updateUser", "409", "their own admin role"),
        ("deleteVirtualCluster", "409", "`default`"),
        ("revokeToken", "409", "bootstrap admin token"),
        ("cancelJob", "409", "already ended"),
        ("getGpuHistory", "404", "`job`"),
    ]:
        assert rule in operations[operation_id]["responses"][status]["description"], operation_id
    assert "(409)" in operations["deleteUser"]["description"]
    assert "(409)" in operations["deleteVirtualCluster"]["description"]


async def test_a_method_a_path_lacks_is_a_405_with_allow(client: httpx.AsyncClient) -> None:
    jobs = await client.delete("/api/v1/jobs")
    assert jobs.status_code == 405
    assert jobs.headers["content-type"] == PROBLEM_MEDIA_TYPE
    # GET and POST /api/v1/jobs are two routes: Allow names both.
    assert jobs.headers["allow"] == "GET, POST"
    assert jobs.json()["type"] == "/docs/problems/method-not-allowed"
    # /api/v1/nodes/join is POST only, although GET /api/v1/nodes/{node_id} would take "join".
    join = await client.request("OPTIONS", "/api/v1/nodes/join")
    assert (join.status_code, join.headers["allow"]) == (405, "POST")
    user = await client.post("/api/v1/users/alice")
    assert (user.status_code, user.headers["allow"]) == (405, "DELETE, GET, PATCH")
