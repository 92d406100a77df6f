"""An OpenPAI job protocol v2 YAML with a secret, through every service as a real process:
the task receives the secret (and a parameter) while nothing stored, logged, published or
answered holds it — only ``api.job_secrets``."""

from __future__ import annotations

import asyncio
import hashlib

import asyncpg

from tests.e2e.stack import Stack, wait_state

SECRET = "s3cr3t-value;$(echo injected)"

JOB = f"""\
protocolVersion: 2
name: OpenPAI_secret
type: job
parameters:
  greeting: hello
secrets:
  token: '{SECRET}'
prerequisites:
  - name: image
    type: dockerimage
    uri: 'python:3.12-slim'
taskRoles:
  main:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{gpu: 1, cpu: 1, memoryMB: 256}}
    commands:
      - echo <% $parameters.greeting %>
      - printf %s "<% $secrets.token %>" > secret.txt
      - echo "sha=$(sha256sum < secret.txt | cut -d' ' -f1)"
extras:
  corral: {{allowHostExecution: true}}
"""


async def test_an_openpai_job_with_a_secret_runs_and_nothing_stored_holds_the_secret(
    stack: Stack, database_url: str
) -> None:
    async with stack.client() as http:
        response = await http.post("/api/v1/jobs", content=JOB, headers={"content-type": "application/yaml"})
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
        assert job["state"] == "SUCCEEDED", job
        logs = (await http.get(f"/api/v1/jobs/{job_id}/logs")).text
        # The task saw the secret, byte for byte (a value that is never parsed as shell code).
        # (the first line: no node here runs images, and the job allows the host)
        assert logs.splitlines()[1:] == ["hello", f"sha={hashlib.sha256(SECRET.encode()).hexdigest()}"]
        assert logs.startswith("corral: image python:3.12-slim was not used")
        await asyncio.sleep(0.5)  # the last event's relay
        answers = [
            response.text,
            (await http.get(f"/api/v1/jobs/{job_id}")).text,
            (await http.get("/api/v1/jobs")).text,
            (await http.get(f"/api/v1/jobs/{job_id}/attempts")).text,
            (await http.get(f"/api/v1/jobs/{job_id}/events")).text,
        ]
        events = (await http.get(f"/api/v1/jobs/{job_id}/events")).json()["items"]
        assert [e["type"] for e in events if e["type"].startswith("corral.job.")][
            -1
        ] == "corral.job.succeeded.v1"
    for answer in answers:
        assert SECRET not in answer
    conn = await asyncpg.connect(database_url)
    try:
        tables = await conn.fetch(
            "SELECT table_schema || '.' || table_name AS name FROM information_schema.tables"
            " WHERE table_schema IN ('api', 'corral', 'scheduler', 'launcher', 'monitor', 'alerter')"
            " AND table_type = 'BASE TABLE' AND table_name <> 'job_secrets'"
        )
        for table in tables:
            rows = await conn.fetch(f"SELECT t::text AS row FROM {table['name']} t")  # noqa: S608  # catalog names
            assert not any(SECRET in row["row"] for row in rows), table["name"]
        payloads = await conn.fetch("SELECT payload FROM corral.outbox")
        assert not any(SECRET.encode() in bytes(p["payload"]) for p in payloads)
        assert await conn.fetchval("SELECT value FROM api.job_secrets WHERE job_id = $1", job_id) == SECRET
    finally:
        await conn.close()
    service_logs = [p for p in (stack.home / "logs").rglob("*.log") if job_id not in str(p)]
    service_logs.append(stack.home / "supervisor.log")
    assert service_logs
    for path in service_logs:
        assert SECRET not in path.read_text(errors="replace"), path
