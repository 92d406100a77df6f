"""A job's inputs at submit: each model version or job output resolved to its artifact and
pinned with the job, or the submit refused (422 naming ``inputs[i]`` and what is wrong)
with nothing stored."""

from __future__ import annotations

from shared.db.pool import Database
from tests.api.models_seed import (
    Users,
    count,
    spec,
    submit,
    trained,
    users_fixture,  # noqa: F401  # the fixture users
)


async def _pins(db: Database, job_id: str) -> list[tuple[str, str]]:
    rows = await db.fetch("SELECT ref, path FROM api.job_inputs WHERE job_id = $1 ORDER BY position", job_id)
    return [(r["ref"], r["path"]) for r in rows]


async def test_inputs_are_pinned_with_the_job(users: Users, db: Database) -> None:
    job = await trained(db, users.alice)
    for _ in range(2):
        assert (
            await users.alice.post("/api/v1/models/mnist/versions", json={"from": f"{job}:model"})
        ).status_code == 201
    inputs = [
        {"model": "mnist@latest"},
        {"model": "mnist@1", "path": "baseline"},
        {"artifact": f"{job}:metrics"},
    ]
    evaluation = await submit(users.alice, inputs)
    assert await _pins(db, evaluation) == [
        ("mnist@2", "models/mnist/2"),
        ("mnist@1", "baseline"),
        (f"{job}:metrics", f"artifacts/{job}/metrics"),
    ]
    # The spec keeps what was asked; a resubmit pins again, to what is newest then.
    stored = (await users.alice.get(f"/api/v1/jobs/{evaluation}")).json()
    assert stored["spec"]["inputs"][0]["model"] == "mnist@latest"
    assert (
        await users.alice.post("/api/v1/models/mnist/versions", json={"from": f"{job}:model"})
    ).status_code == 201
    again = (await users.alice.post(f"/api/v1/jobs/{evaluation}/resubmit")).json()["id"]
    assert (await _pins(db, again))[0] == ("mnist@3", "models/mnist/3")
    # An Idempotency-Key's replay answers the first job, pinned once.
    headers = {"Idempotency-Key": "eval-1"}
    first = await users.alice.post("/api/v1/jobs", json=spec(inputs=inputs), headers=headers)
    replay = await users.alice.post("/api/v1/jobs", json=spec(inputs=inputs), headers=headers)
    assert first.json()["id"] == replay.json()["id"]
    assert len(await _pins(db, first.json()["id"])) == 3


async def test_inputs_that_cannot_be_used_are_refused_by_name(users: Users, db: Database) -> None:
    job = await trained(db, users.alice)
    assert (
        await users.alice.post("/api/v1/models/mnist/versions", json={"from": f"{job}:model"})
    ).status_code == 201
    pending = await submit(users.alice)
    bobs = await trained(db, users.bob)
    before = (await count(db, "api.jobs"), await count(db, "api.job_inputs"))
    cases = [
        ([{"model": "mnist@7"}], "inputs[0]: model mnist has no version 7; versions: 1"),
        (
            [{"model": "mnist@1"}, {"model": "resnet@latest"}],
            "inputs[1]: no model named 'resnet' that you may read; GET /api/v1/models lists those you may",
        ),
        ([{"artifact": f"{pending}:model"}], f"inputs[0]: job {pending} is PENDING; only a succeeded job's"),
        (
            [{"artifact": f"{job}:logs"}],
            f"inputs[0]: job {job} has no output 'logs'; its outputs: metrics, model",
        ),
        ([{"artifact": f"{bobs}:model"}], f"inputs[0]: job {bobs} does not exist or is not yours"),
        (
            [{"model": "mnist@latest"}, {"model": "mnist@1"}],
            "inputs[0]: mnist@1 lands at input path 'models/mnist/1', as another input does",
        ),
    ]
    for inputs, detail in cases:
        for path in ("/api/v1/jobs", "/api/v1/jobs/dry-run"):
            refused = await users.alice.post(path, json=spec(inputs=inputs))
            assert refused.status_code == 422, (path, inputs, refused.text)
            assert refused.json()["detail"].startswith(detail), refused.json()["detail"]
    assert (await count(db, "api.jobs"), await count(db, "api.job_inputs")) == before
    # A shape the spec itself refuses never reaches the database.
    malformed = await users.alice.post("/api/v1/jobs", json=spec(inputs=[{"model": "mnist"}]))
    assert malformed.status_code == 422
    assert await count(db, "api.jobs") == before[0]
