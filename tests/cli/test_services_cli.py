"""``corral service create|list|show|scale|update|delete`` and ``corral submit`` of a
service, against the real API as alice, with the controller's passes run by hand: a
service is created, its replicas listed with their state, scaled, rolled to another
model version, deleted; a wrong call is a one-line error, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import yaml

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import shape_cache
from services.api.serving.controller import ControllerLease, ServiceController
from shared.db.pool import Database
from tests.api.models_seed import trained
from tests.api.services_seed import replica_jobs, service_spec
from tests.cli.conftest import Corral
from tests.fixtures.api import Api


async def _controller_pass(db: Database, database_url: str) -> None:
    controller = ServiceController(db, shape_cache(JobRepository(db)), ControllerLease(database_url))
    async with db.connection() as conn:
        await controller.pass_once(conn)


def _file(tmp_path: Path, spec: dict[str, object], name: str = "serve.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return str(path)


async def test_a_service_is_created_shown_scaled_and_deleted(
    corral: Corral, db: Database, database_url: str, tmp_path: Path
) -> None:
    code, out, err = await corral("service", "create", "-f", _file(tmp_path, service_spec(replicas=2)))
    assert code == 0, err
    assert out.strip() == "service echo created: /serve/echo/"
    await _controller_pass(db, database_url)

    code, out, err = await corral("service", "list")
    assert code == 0, err
    assert out.splitlines()[1].split()[:6] == ["echo", "alice", "Progressing", "0/2", "1", "-"]
    code, out, err = await corral("service", "show", "echo")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "echo: Progressing (0/2 ready, revision 1) at /serve/echo/"
    jobs = [r["job_id"] for r in await replica_jobs(db, "echo")]
    assert [line.split()[:5] for line in lines[3:]] == [[job, "1", "Pending", "no", "0"] for job in jobs]

    code, out, err = await corral("service", "scale", "echo", "1")
    assert code == 0, err
    assert out.startswith("service echo scaled to 1 replicas")
    code, out, _ = await corral("service", "show", "echo", "--json")
    assert json.loads(out)["replicas"] == 1

    code, out, err = await corral("service", "delete", "echo")
    assert code == 0, err
    assert out.startswith("service echo is being deleted")
    code, _, err = await corral("service", "show", "nope")
    assert code == 1
    assert "no service named 'nope'" in err
    assert "Traceback" not in err


async def test_submit_of_a_service_spec_creates_the_service(
    corral: Corral, db: Database, tmp_path: Path
) -> None:
    code, out, err = await corral("submit", _file(tmp_path, service_spec(name="sub", replicas=1)))
    assert code == 0, err
    assert out.strip() == "service sub created: /serve/sub/"
    assert await db.fetchval("SELECT owner FROM api.services WHERE name = 'sub'") == "alice"
    assert await db.fetchval("SELECT count(*) FROM api.jobs") == 0  # replicas are the controller's


async def test_update_with_a_model_version_rolls_to_a_new_revision(
    corral: Corral, api: Api, db: Database, tmp_path: Path
) -> None:
    async with httpx.AsyncClient(base_url=api.url, headers={"Authorization": f"Bearer {api.alice}"}) as alice:
        for _ in range(2):
            job = await trained(db, alice)
            registered = await alice.post("/api/v1/models/mnist/versions", json={"from": f"{job}:model"})
            assert registered.status_code == 201, registered.text
    spec = {**service_spec(replicas=1), "inputs": [{"model": "mnist@latest"}]}
    code, _, err = await corral("service", "create", "-f", _file(tmp_path, spec))
    assert code == 0, err
    # Pinned in the template: every replica of the revision serves the same version.
    template = await db.fetchval("SELECT spec FROM api.services WHERE name = 'echo'")
    assert template["inputs"] == [{"model": "mnist@2", "artifact": None, "path": None}]

    code, out, err = await corral("service", "update", "echo", "--model", "mnist@1")
    assert code == 0, err
    assert out.startswith("service echo at revision 2: rolling out")
    code, out, _ = await corral("service", "show", "echo", "--json")
    assert json.loads(out)["revision"] == 2
    template = await db.fetchval("SELECT spec FROM api.services WHERE name = 'echo'")
    assert template["inputs"] == [{"model": "mnist@1", "artifact": None, "path": None}]

    code, _, err = await corral("service", "update", "echo", "--model", "resnet@1")
    assert code == 1
    assert "the service reads no model 'resnet' (its model inputs: mnist@1)" in err
    code, _, err = await corral("service", "update", "echo")
    assert code == 2
    assert "give one of -f FILE" in err
