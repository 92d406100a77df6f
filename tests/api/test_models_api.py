"""Models through the API: a job's output registered as a numbered version, read back
with its lineage, named as the next job's input; who may read, use and extend a model;
registers that are refused change nothing; registers at once get distinct numbers."""

from __future__ import annotations

import asyncio

from shared.db.pool import Database
from tests.api.models_seed import (
    Users,
    as_user,
    count,
    submit,
    succeed,
    token_for,
    trained,
    users_fixture,  # noqa: F401  # the fixture users
)


async def test_a_version_is_registered_read_and_trains_the_next(users: Users, db: Database) -> None:
    first = await trained(db, users.alice)
    registered = await users.alice.post(
        "/api/v1/models/mnist/versions", json={"from": f"{first}:model", "description": "baseline"}
    )
    assert registered.status_code == 201, registered.text
    v1 = registered.json()
    assert (v1["ref"], v1["version"], v1["parent_version"], v1["files"]) == ("mnist@1", 1, None, 2)
    assert (v1["source_job"], v1["source_output"], v1["registered_by"]) == (first, "model", "alice")
    assert v1["size_bytes"] == 66
    assert len(v1["sha256"]) == 64

    # The next job takes mnist@latest: pinned to version 1 at submit, where it lands too.
    second = await submit(users.alice, [{"model": "mnist@latest"}])
    pinned = await db.fetch("SELECT ref, artifact_id, path FROM api.job_inputs WHERE job_id = $1", second)
    assert [dict(r) for r in pinned] == [
        {"ref": "mnist@1", "artifact_id": v1["artifact_id"], "path": "models/mnist/1"}
    ]
    await succeed(db, second, {"model": {"weights.bin": b"\x01" * 64}})

    # Its output, registered without a parent, is version 2, the child of the version it read.
    v2 = (await users.alice.post("/api/v1/models/mnist/versions", json={"from": f"{second}:model"})).json()
    assert (v2["version"], v2["parent_version"]) == (2, 1)
    assert v2["source_inputs"] == [
        {"position": 0, "ref": "mnist@1", "artifact_id": v1["artifact_id"], "path": "models/mnist/1"}
    ]
    latest = (await users.alice.get("/api/v1/models/mnist/versions/latest")).json()
    assert latest == v2
    assert (await users.alice.get("/api/v1/models/mnist/versions/1")).json()["description"] == "baseline"

    model = (await users.alice.get("/api/v1/models/mnist")).json()
    assert (model["owner"], model["group"], model["latest_version"]) == ("alice", None, 2)
    assert [v["version"] for v in model["versions"]] == [2, 1]
    assert [m["name"] for m in (await users.alice.get("/api/v1/models")).json()["items"]] == ["mnist"]

    # The job's kept outputs, and one artifact's manifest.
    kept = (await users.alice.get(f"/api/v1/jobs/{first}/artifacts")).json()["items"]
    assert [(a["output"], a["files"]) for a in kept] == [("metrics", 0), ("model", 2)]
    artifact = (await users.alice.get(f"/api/v1/artifacts/{v1['artifact_id']}")).json()
    assert [f["path"] for f in artifact["manifest"]] == ["config.json", "weights.bin"]
    assert artifact["sha256"] == v1["sha256"]


async def test_models_are_their_owners_and_their_groups(users: Users, db: Database) -> None:
    job = await trained(db, users.alice)
    shared = await users.alice.post(
        "/api/v1/models/digits/versions", json={"from": f"{job}:model", "group": "vision"}
    )
    assert shared.status_code == 201, shared.text
    mine = await users.alice.post("/api/v1/models/private/versions", json={"from": f"{job}:model"})
    assert mine.status_code == 201, mine.text

    # carol (vision) reads the shared model, its artifact, and may use it; not alice's other one.
    assert [m["name"] for m in (await users.carol.get("/api/v1/models")).json()["items"]] == ["digits"]
    assert (await users.carol.get("/api/v1/models/digits/versions/1")).status_code == 200
    artifact_id = shared.json()["artifact_id"]
    assert (await users.carol.get(f"/api/v1/artifacts/{artifact_id}")).status_code == 200
    assert (await users.carol.post("/api/v1/jobs", json=_job([{"model": "digits@1"}]))).status_code == 201
    assert (await users.carol.get("/api/v1/models/private")).status_code == 404
    # ... but may not extend it, nor read the job that trained it.
    carols = await trained(db, users.carol)
    refused = await users.carol.post("/api/v1/models/digits/versions", json={"from": f"{carols}:model"})
    assert refused.status_code == 403, refused.text
    assert "only the owner of model digits (alice) or an admin" in refused.json()["detail"]
    assert (await users.carol.get(f"/api/v1/jobs/{job}/artifacts")).status_code == 404

    # bob (speech) sees none of it: not found, as a job; a name he cannot see is still taken.
    assert (await users.bob.get("/api/v1/models")).json()["items"] == []
    for path in (
        "/api/v1/models/digits",
        "/api/v1/models/digits/versions/1",
        f"/api/v1/artifacts/{artifact_id}",
    ):
        answer = await users.bob.get(path)
        assert answer.status_code == 404, (path, answer.text)
    assert (await users.bob.get("/api/v1/models/digits")).json()["detail"] == (
        "no model named 'digits' that you may read; GET /api/v1/models lists those you may"
    )
    bobs = await trained(db, users.bob)
    taken = await users.bob.post("/api/v1/models/digits/versions", json={"from": f"{bobs}:model"})
    assert taken.status_code == 409, taken.text
    used = await users.bob.post("/api/v1/jobs", json=_job([{"model": "digits@1"}]))
    assert used.status_code == 422
    assert used.json()["detail"] == (
        "inputs[0]: no model named 'digits' that you may read; GET /api/v1/models lists those you may"
    )
    # Admins read and extend everything.
    assert {m["name"] for m in (await users.admin.get("/api/v1/models")).json()["items"]} == {
        "digits",
        "private",
    }
    page = (await users.admin.get("/api/v1/models", params={"limit": 1})).json()
    assert ([m["name"] for m in page["items"]], page["next_cursor"]) == (["digits"], "digits")
    page = (
        await users.admin.get("/api/v1/models", params={"limit": 1, "cursor": page["next_cursor"]})
    ).json()
    assert ([m["name"] for m in page["items"]], page["next_cursor"]) == (["private"], None)
    extended = await users.admin.post("/api/v1/models/private/versions", json={"from": f"{bobs}:model"})
    assert extended.json()["version"] == 2
    assert await count(db, "api.model_versions") == 3
    # A deleted group shares its models no more.
    assert (await users.admin.delete("/api/v1/groups/vision")).status_code == 204
    assert (await users.carol.get("/api/v1/models/digits")).status_code == 404


async def test_refused_registers_say_why_and_change_nothing(users: Users, db: Database) -> None:
    job = await trained(db, users.alice)
    assert (
        await users.alice.post("/api/v1/models/mnist/versions", json={"from": f"{job}:model"})
    ).status_code == 201
    running = await submit(users.alice)
    bobs = await trained(db, users.bob)
    before = (await count(db, "api.models"), await count(db, "api.model_versions"))
    cases = [
        (
            "mnist",
            {"from": f"{running}:model"},
            f"from: job {running} is PENDING; only a succeeded job's outputs",
        ),
        ("fresh", {"from": f"{bobs}:model"}, f"from: job {bobs} does not exist or is not yours"),
        (
            "fresh",
            {"from": f"{job}:weights"},
            f"from: job {job} has no output 'weights'; its outputs: metrics, model",
        ),
        ("fresh", {"from": f"{job}:metrics"}, f"from: output 'metrics' of job {job} is empty"),
        ("mnist", {"from": f"{job}:model", "parent": 7}, "parent: model mnist has no version 7; versions: 1"),
        (
            "fresh",
            {"from": f"{job}:model", "group": "speech"},
            "group: you are not a member of a group named 'speech'",
        ),
        (
            "mnist",
            {"from": f"{job}:model", "group": "vision"},
            "group: model mnist is already shared with no group",
        ),
    ]
    for name, body, detail in cases:
        refused = await users.alice.post(f"/api/v1/models/{name}/versions", json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["detail"].startswith(detail), refused.json()["detail"]
    for name, body in (
        ("mnist", {"from": "not-a-job:model"}),
        ("mnist", {"from": f"{job}:model", "colour": "blue"}),
        ("Not_A_Name", {"from": f"{job}:model"}),
        ("mnist", {"from": f"{job}:model", "parent": 0}),
        ("mnist", {"from": f"{job}:model", "parent": "1"}),
        ("mnist", {"from": f"{job}:model", "parent": True}),
        ("mnist", {"from": f"{job}:model", "description": "nul\x00"}),
    ):
        assert (await users.alice.post(f"/api/v1/models/{name}/versions", json=body)).status_code == 422, body
    assert (await count(db, "api.models"), await count(db, "api.model_versions")) == before
    assert (await users.alice.get("/api/v1/models/mnist/versions/9")).status_code == 404
    # A read-only token reads models; registering needs the submit scope.
    async with as_user(users.admin, await token_for(users.admin, "alice", "read")) as reader:
        assert (await reader.get("/api/v1/models/mnist/versions/1")).status_code == 200
        unscoped = await reader.post("/api/v1/models/mnist/versions", json={"from": f"{job}:model"})
        assert unscoped.status_code == 403, unscoped.text
    assert (await count(db, "api.models"), await count(db, "api.model_versions")) == before


async def test_registers_at_once_get_distinct_versions(users: Users, db: Database) -> None:
    job = await trained(db, users.alice)
    answers = await asyncio.gather(
        *(users.alice.post("/api/v1/models/race/versions", json={"from": f"{job}:model"}) for _ in range(8))
    )
    assert [a.status_code for a in answers] == [201] * 8, [a.text for a in answers]
    assert sorted(a.json()["version"] for a in answers) == list(range(1, 9))
    assert await count(db, "api.models") == 1


def _job(inputs: list[dict[str, str]]) -> dict[str, object]:
    return {
        "name": "eval",
        "tasks": [{"name": "main", "command": "true", "resources": {"gpus": 0}}],
        "inputs": inputs,
    }
