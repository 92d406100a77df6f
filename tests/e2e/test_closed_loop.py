"""The closed loop a new user walks through (README, examples/serving, examples/batch_predict),
on a real stack with real CPU training: train a model, register it, serve it, label new
data with it in batch, train the next version on those labels, register that and roll the
service over to it while a client keeps calling: no call fails, and the answers switch
from version 1 to version 2.

Specs are filled by ``examples/spec.sh`` and models and services are handled with the
``corral`` command, as the examples' READMEs tell a user to; the test reads results
through the API."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.stack import Stack

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SERVICE = "points"

# Five jobs and four replicas, each a Python process that imports torch: on a small
# machine that is more than the suite's usual 120 s.
pytestmark = pytest.mark.timeout(300)


async def run(stack: Stack, *args: str, stdin: str | None = None, check: bool = True) -> str:
    """A command as a user types it (``corral`` or ``examples/spec.sh``), without blocking
    the loop the client calls the service from; its standard output (``check``: after
    exit 0)."""
    env = {
        **os.environ,
        "CORRAL_URL": stack.base_url,
        "CORRAL_TOKEN": stack.token(),
        "PYTHON": sys.executable,  # spec.sh: the Python that runs this test (it has torch)
    }
    command = [sys.executable, "-m", "corral", *args[1:]] if args[0] == "corral" else list(args)
    process = await asyncio.create_subprocess_exec(
        *command,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), 180)
    said = f"{args} exited {process.returncode}:\n{out.decode()}\n{err.decode()}"
    assert process.returncode == 0 or not check, said
    return out.decode()


async def spec(stack: Stack, path: str, *fill: str) -> str:
    return await run(stack, str(EXAMPLES / "spec.sh"), str(EXAMPLES / path), *fill)


async def succeeded_job(stack: Stack, http: httpx.AsyncClient, spec_text: str) -> str:
    """Submit with the CLI and wait until it SUCCEEDED (else say why, with its log); its id."""
    submitted = await run(stack, "corral", "submit", "-", "--wait", "--json", stdin=spec_text, check=False)
    job = json.loads(submitted)
    log = (await http.get(f"/api/v1/jobs/{job['id']}/logs")).text
    assert job["state"] == "SUCCEEDED", f"{job['reason']}\n{log}"
    job_id: str = job["id"]
    return job_id


async def service_status(http: httpx.AsyncClient) -> dict[str, Any]:
    response = await http.get(f"/api/v1/services/{SERVICE}")
    assert response.status_code == 200, response.text
    status: dict[str, Any] = response.json()
    return status


async def wait_rolled_out(http: httpx.AsyncClient, revision: int, timeout_s: float) -> dict[str, Any]:
    """Every replica of ``revision``, all ready, none draining, the service Ready."""
    deadline = time.monotonic() + timeout_s
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = await service_status(http)
        replicas = status["replica_list"]
        if (
            status["state"] == "Ready"
            and status["revision"] == revision
            and len(replicas) == status["replicas"]
            and all(r["revision"] == revision and r["ready"] and not r["draining"] for r in replicas)
        ):
            return status
        await asyncio.sleep(0.2)
    raise AssertionError(f"service not rolled out to revision {revision} in {timeout_s}s: {status}")


@dataclass
class Caller:
    """Calls the service through the gateway over and over, as an application would,
    keeping every answer's status and model version in order."""

    http: httpx.AsyncClient
    answers: list[tuple[int, int | None, str]] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    async def call_until_stopped(self) -> None:
        while not self.stopping.is_set():
            try:
                response = await self.http.post(
                    f"/serve/{SERVICE}/predict", json={"points": [[0.0, 2.0], [1.8, -1.0]]}
                )
            except httpx.TransportError as exc:
                self.answers.append((0, None, repr(exc)))
                continue
            version = response.json().get("version") if response.status_code == 200 else None
            self.answers.append((response.status_code, version, response.text[:300]))
            await asyncio.sleep(0.02)

    def versions(self) -> list[int | None]:
        return [version for _, version, _ in self.answers]

    def failures(self) -> list[tuple[int, int | None, str]]:
        return [answer for answer in self.answers if answer[0] != 200]


async def test_train_register_serve_predict_retrain_and_roll_out_without_failed_requests(
    stack: Stack,
) -> None:
    async with stack.client() as http:
        # 1. Train version 1; its model and a pool of new points become artifacts.
        first = await succeeded_job(stack, http, await spec(stack, "serving/job.yaml"))
        listed = (await http.get(f"/api/v1/jobs/{first}/artifacts")).json()["items"]
        outputs = {artifact["output"]: artifact for artifact in listed}
        assert outputs["model"]["files"] == 2, outputs  # model.pt and meta.json
        assert outputs["points"]["files"] == 1, outputs

        # 2. Register it, serve it with 2 replicas; callers reach it through the gateway.
        await run(stack, "corral", "model", "register", SERVICE, "--from", f"{first}:model")
        await run(
            stack, "corral", "service", "create", "-f", "-", stdin=await spec(stack, "serving/service.yaml")
        )
        await wait_rolled_out(http, revision=1, timeout_s=60)
        answer = await http.post(f"/serve/{SERVICE}/predict", json={"points": [[0.0, 2.0]]})
        assert answer.status_code == 200, answer.text
        assert answer.json()["version"] == 1
        assert answer.json()["predictions"][0]["label"] == 0

        # 3. Batch prediction: 2 shards label the new points with version 1.
        predict_spec = await spec(stack, "batch_predict/job.yaml", f"points={first}:points")
        predicted = await succeeded_job(stack, http, predict_spec)
        (predictions,) = (await http.get(f"/api/v1/jobs/{predicted}/artifacts")).json()["items"]
        assert sorted(
            f["path"] for f in (await http.get(f"/api/v1/artifacts/{predictions['id']}")).json()["manifest"]
        ) == ["part-0.jsonl", "part-1.jsonl"]
        shard = (await http.get(f"/api/v1/jobs/{predicted}/logs", params={"task": "shard-1"})).text
        assert "rank 1 of 2: 200 records labelled by points@1" in shard, shard

        # 4. Version 2 trains on the labelled points and version 1's confident predictions.
        second = await succeeded_job(
            stack, http, await spec(stack, "serving/retrain.yaml", f"predictions={predicted}:predictions")
        )
        log = (await http.get(f"/api/v1/jobs/{second}/logs")).text
        assert "training on 300 labelled points and 0 predicted" not in log, log
        assert "predicted ones" in log, log

        # 5. Register version 2 and roll the service over while a client keeps calling it.
        await run(stack, "corral", "model", "register", SERVICE, "--from", f"{second}:model", "--parent", "1")
        lineage = (await http.get(f"/api/v1/models/{SERVICE}/versions/2")).json()
        assert lineage["source_job"] == second, lineage
        assert lineage["parent_version"] == 1, lineage
        assert [i["ref"] for i in lineage["source_inputs"]] == [f"{predicted}:predictions"], lineage

        caller = Caller(http)
        calling = asyncio.create_task(caller.call_until_stopped())
        try:
            await asyncio.sleep(1.0)  # answers from version 1 before the update
            await run(stack, "corral", "service", "update", SERVICE, "--model", f"{SERVICE}@2")
            status = await wait_rolled_out(http, revision=2, timeout_s=90)
            rolled_out_at = len(caller.answers)
            await asyncio.sleep(1.0)  # and from version 2 after it
        finally:
            caller.stopping.set()
            await calling

    assert len(caller.answers) >= 50, caller.answers  # it really called throughout
    assert caller.failures() == [], caller.failures()[:5]
    versions = caller.versions()
    assert versions[0] == 1, versions
    assert versions[-1] == 2, versions
    assert set(versions) == {1, 2}, versions
    # Once every replica serves version 2, nothing answers from version 1 again.
    assert set(versions[rolled_out_at:]) == {2}, versions
    assert len(status["replica_list"]) == 2, status
