"""The ``corral`` command against the real API (in this process, as a user's shell would
run it): ``--json`` output parses, and the exit codes are the documented ones
(corral/commands/errors.py): 0 ok, 1 refused, failed or not found, 2 usage, 4 auth,
5 unreachable."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from shared.bus.nats import NatsBus
from shared.db.pool import Database
from tests.api.test_events_api import _job, _subscribed, publish, running, submitted
from tests.cli.conftest import Corral
from tests.fixtures.api import Api


async def test_jobs_commands_print_json_that_parses_and_tables_for_people(
    corral: Corral, tmp_path: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: hello\ntasks:\n  - name: main\n    command: echo hi\n    resources: {gpus: 2}\n")
    code, out, _ = await corral("submit", str(spec), "--json")
    assert code == 0
    job = json.loads(out)
    assert (job["state"], job["user"]) == ("PENDING", "alice")
    code, out, _ = await corral("submit", str(spec))
    assert code == 0
    second = out.split()[0]
    assert out.strip() == f"{second} submitted (PENDING)"

    code, out, _ = await corral("jobs", "--json")
    assert (code, [j["id"] for j in json.loads(out)]) == (0, [second, job["id"]])
    code, out, _ = await corral("jobs")
    assert out.splitlines()[0].split()[:5] == ["JOB", "NAME", "USER", "VC", "STATE"]
    assert out.splitlines()[1].split()[:6] == [second, "hello", "alice", "default", "PENDING", "2"]
    code, out, _ = await corral("show", job["id"], "--json")
    assert (code, json.loads(out)["spec"]["tasks"][0]["resources"]["gpus"]) == (0, 2)
    code, out, _ = await corral("why", job["id"], "--json")
    assert json.loads(out) == {"id": job["id"], "state": "PENDING", "reason": "", "pending": None}
    code, out, _ = await corral("why", job["id"])
    assert out.strip() == f"job {job['id']} (hello) is PENDING: the scheduler has not considered it yet"
    code, out, _ = await corral("cancel", job["id"])
    assert (code, out.strip()) == (0, f"{job['id']}: cancel requested (CANCELLED)")
    code, out, _ = await corral("jobs", "--state", "CANCELLED", "--json")
    assert [j["id"] for j in json.loads(out)] == [job["id"]]
    for listing in (
        ("nodes",),
        ("gpus",),
        ("alerts",),
        ("silences",),
        ("webhooks",),
        ("vcs",),
    ):
        code, out, err = await corral(*listing, "--json")
        assert code == 0, err
        assert isinstance(json.loads(out), list)
    # The services and, under make up, what its supervisor keeps alive (nothing here).
    code, out, err = await corral("instances", "--json")
    assert code == 0, err
    assert isinstance(json.loads(out)["items"], list)
    assert json.loads(out)["supervised"] == []


@pytest.mark.slow
async def test_exit_codes_scripts_can_rely_on(
    corral: Corral, api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = await corral("show", "job-nope")
    assert (code, out) == (1, "")
    assert err.strip() == "corral show: 404: no job with id 'job-nope'; list your jobs with GET /api/v1/jobs"
    code, _, err = await corral("vc", "set", "vision", "--quota", "H100=4")
    assert code == 4  # alice is no admin
    code, _, err = await corral("ack", "alr-nope")
    assert code == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "tasks": [{"name": "main", "command": "true", "resources": {"gpus": 65}}]}')
    code, _, err = await corral("submit", str(bad))
    assert code == 1
    assert "tasks.0.resources.gpus" in err
    code, _, err = await corral("submit", str(tmp_path / "missing.yaml"))
    assert code == 2
    code, _, err = await corral("jobs", "--state", "SLEEPING")
    assert code == 2
    code, _, err = await corral("silence", "not a matcher")
    assert code == 2
    code, _, err = await corral("--token", "crl_wrong", "jobs")
    assert code == 4
    code, _, err = await corral("--url", "http://127.0.0.1:9", "cancel", "job-x", "--json")
    assert code == 5
    assert "cannot reach the Corral API at http://127.0.0.1:9" in err


async def test_login_keeps_the_url_and_token_for_later_commands(
    corral: Corral, api: Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CORRAL_URL")
    monkeypatch.delenv("CORRAL_TOKEN")
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "no-stack-here"))
    code, _, err = await corral("jobs")
    assert (code, "no token: run `corral login`" in err) == (4, True)
    code, _, _ = await corral("login", "--url", api.url, "--token", "crl_wrong")
    assert code == 4
    assert not (tmp_path / "config.toml").exists()
    code, out, _ = await corral("login", "--url", api.url, "--token", api.alice)
    assert (code, out.strip()) == (0, f"logged in to {api.url}; saved in {tmp_path / 'config.toml'}")
    code, out, _ = await corral("jobs", "--json")
    assert (code, json.loads(out)) == (0, [])


async def test_events_follows_the_stream_as_json_lines(
    corral: Corral, api: Api, bus: NatsBus, db: Database
) -> None:
    job = await _job(db, "alice")
    following = asyncio.create_task(corral("events", "--type", "corral.job.*", "--json", "--count", "2"))
    await _subscribed(api, 1)
    events = [submitted(job, "alice"), running(job)]
    await publish(bus, *events)
    async with asyncio.timeout(10):
        code, out, _ = await following
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [line["event"]["id"] for line in lines] == [e.id for e in events]
    assert all(line["cursor"] for line in lines)
