"""``corral model register|list|show`` and ``corral artifacts`` against the real API, as
alice, and the async SDK's calls for the same: a job's output becomes mnist@1, is listed,
shown with its lineage; a wrong reference is a one-line error, never a traceback."""

from __future__ import annotations

import json

import httpx

from corral.sdk import AsyncClient
from shared.db.pool import Database
from tests.api.models_seed import spec, succeed
from tests.cli.conftest import Corral
from tests.fixtures.api import Api


async def _trained_job(api: Api, db: Database) -> str:
    async with httpx.AsyncClient(base_url=api.url, headers={"Authorization": f"Bearer {api.alice}"}) as http:
        submitted = await http.post("/api/v1/jobs", json=spec())
    assert submitted.status_code == 201, submitted.text
    job_id = str(submitted.json()["id"])
    await succeed(db, job_id, {"model": {"weights.bin": b"\x00" * 2048}, "metrics": {}})
    return job_id


async def test_a_model_is_registered_listed_and_shown(corral: Corral, api: Api, db: Database) -> None:
    job = await _trained_job(api, db)
    code, out, err = await corral(
        "model", "register", "mnist", "--from", f"{job}:model", "--description", "base"
    )
    assert code == 0, err
    assert out.splitlines()[0] == "registered mnist@1"
    assert f"  from       {job}:model" in out.splitlines()

    code, out, err = await corral("model", "list")
    assert code == 0, err
    assert out.splitlines()[1].split()[:4] == ["mnist", "alice", "-", "1"]
    code, out, _ = await corral("model", "show", "mnist")
    assert out.splitlines()[0] == "mnist: owned by alice. base"
    assert out.splitlines()[2].split()[:4] == ["1", "-", "1", "2.0KiB"]
    code, out, _ = await corral("model", "show", "mnist@latest", "--json")
    shown = json.loads(out)
    assert (code, shown["ref"], shown["source_job"], shown["source_inputs"]) == (0, "mnist@1", job, [])

    code, out, err = await corral("artifacts", job)
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["metrics", "model"]

    async with AsyncClient(api.url, api.alice) as sdk:
        version = await sdk.get_model_version("mnist", 1)
        artifact = await sdk.get_artifact(version.artifact_id)
    assert [(f.path, f.size) for f in artifact.manifest] == [("weights.bin", 2048)]

    code, _, err = await corral("model", "register", "mnist", "--from", f"{job}:nope")
    assert code == 1
    assert f"job {job} has no output 'nope'; its outputs: metrics, model" in err
    assert "Traceback" not in err
    code, _, err = await corral("model", "show", "mnist@newest")
    assert code == 2
    assert "give NAME or NAME@VERSION" in err
    code, _, err = await corral("model", "show", "resnet")
    assert code == 1
    assert "no model named 'resnet'" in err
