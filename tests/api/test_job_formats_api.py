"""Submitting as YAML and as OpenPAI job protocol v2 over HTTP, on a real database: the
mapping to the native spec, secrets kept out of everything stored or answered, every
protocol error a 422 naming the field, and hostile YAML (alias bombs, deep nesting,
duplicate and non-string keys, Python tags, several documents, huge bodies) a clear 4xx
with nothing stored."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import yaml

from shared.db.pool import Database

YAML = {"content-type": "application/yaml"}
SECRET = "tok-3f9;$(touch /tmp/pwned)"

OPENPAI = f"""\
protocolVersion: 2
name: CIFAR10_train
type: job
version: 1.0
contributor: alice
description: a two-role job, as OpenPAI's portal exports it
jobRetryCount: 2
parameters:
  steps: 1000
  lr: 0.5
secrets:
  hf_token: '{SECRET}'
prerequisites:
  - name: image
    type: dockerimage
    uri: 'python:3.12-slim'
taskRoles:
  master:
    instances: 1
    completion:
      minFailedInstances: 1
      minSucceededInstances: -1
    taskRetryCount: 0
    dockerImage: image
    resourcePerInstance:
      gpu: 1
      cpu: 4
      memoryMB: 8192
      ports: {{http: 1, ssh: 2}}
    commands:
      - python train.py --steps <% $parameters.steps %> --lr <%$parameters.lr%>
      - 'curl -H "Authorization: Bearer <% $secrets.hf_token %>" https://hub.example'
  worker:
    instances: 3
    completion: {{minSucceededInstances: 2, minFailedInstances: -1}}
    dockerImage: image
    resourcePerInstance: {{gpu: 2, cpu: 8, memoryMB: 16384}}
    commands: [python worker.py]
deployments:
  - name: prod
    taskRoles:
      worker: {{preCommands: [pip install -r requirements.txt], postCommands: [echo done]}}
defaults:
  virtualCluster: default
  deployment: prod
extras:
  gangAllocation: true
  hivedScheduler:
    jobPriorityClass: prod
    taskRoles:
      master: {{skuType: H100}}
      worker: {{skuType: H100}}
"""


async def _counts(db: Database) -> tuple[int, int, int]:
    row = await db.fetchrow(
        "SELECT (SELECT count(*) FROM api.jobs) AS jobs, (SELECT count(*) FROM corral.outbox) AS events,"
        " (SELECT count(*) FROM api.job_secrets) AS secrets"
    )
    assert row is not None
    return row["jobs"], row["events"], row["secrets"]


async def _everything_stored(db: Database) -> str:
    """Every row the submit could have written, as text: jobs, outbox (events), audit."""
    parts = []
    for table in ("api.jobs", "corral.outbox", "api.audit_log", "api.idempotency_keys"):
        rows = await db.fetch(f"SELECT * FROM {table}")  # noqa: S608  # fixed table names
        parts += [repr(dict(row)) for row in rows]
    outbox = await db.fetch("SELECT payload FROM corral.outbox")
    parts += [bytes(row["payload"]).decode() for row in outbox]
    return "\n".join(parts)


async def test_the_native_spec_as_yaml_is_the_same_job_as_json(client: httpx.AsyncClient) -> None:
    body = "name: hello\ntasks:\n  - name: main\n    command: echo hello\n    resources: {gpus: 1}\n"
    for content_type in ("application/yaml", "application/x-yaml", "text/yaml"):
        response = await client.post("/api/v1/jobs", content=body, headers={"content-type": content_type})
        assert response.status_code == 201, response.text
        assert response.json()["spec"]["tasks"][0]["command"] == "echo hello"
        assert response.json()["spec"]["tasks"][0]["resources"]["gpus"] == 1


async def test_an_openpai_v2_job_maps_to_the_native_spec(client: httpx.AsyncClient) -> None:
    response = await client.post("/api/v1/jobs", content=OPENPAI, headers=YAML)
    assert response.status_code == 201, response.text
    spec = response.json()["spec"]
    assert spec["name"] == "cifar10_train"
    assert spec["virtual_cluster"] == "default"
    assert spec["priority"] == 100  # jobPriorityClass: prod
    assert spec["retry"]["max_retries"] == 2
    master, worker = spec["tasks"]
    assert (master["name"], master["instances"], master["image"]) == ("master", 1, "python:3.12-slim")
    assert master["resources"] == {
        "gpus": 1,
        "gpu_memory_mb": None,
        "cpus": 4.0,
        "memory_mb": 8192,
        "gpu_type": "H100",
        "numa": "preferred",
    }
    assert master["ports"] == {"http": 1, "ssh": 2}
    assert master["completion"] == {"min_succeeded": None, "min_failed": 1}
    assert master["command"] == (
        "python train.py --steps 1000 --lr 0.5\n"
        'curl -H "Authorization: Bearer ${CORRAL_SECRET_HF_TOKEN}" https://hub.example'
    )
    assert worker["instances"] == 3
    assert worker["completion"] == {"min_succeeded": 2, "min_failed": 3}  # -1: only if all failed
    assert worker["command"] == "pip install -r requirements.txt\npython worker.py\necho done"


async def test_a_field_read_differently_than_asked_is_a_warning_header(client: httpx.AsyncClient) -> None:
    body = _openpai(extras__hivedScheduler__taskRoles__worker={"skuNum": 1, "skuType": "H100"})
    response = await client.post("/api/v1/jobs", content=body, headers=YAML)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["tasks"][1]["resources"]["gpus"] == 1  # skuNum, not gpu: 2
    [warning] = response.headers.get_list("warning")
    assert warning.startswith('299 - "taskRoles.worker: hivedScheduler skuNum 1 differs')
    plain = await client.post("/api/v1/jobs", content=OPENPAI, headers=YAML)
    assert plain.status_code == 201
    assert "warning" not in plain.headers


async def test_an_openpai_job_sent_as_json_is_accepted_too(client: httpx.AsyncClient) -> None:
    document = yaml.safe_load(OPENPAI)
    response = await client.post("/api/v1/jobs", json=document)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["tasks"][1]["name"] == "worker"


async def test_a_secret_is_stored_apart_and_appears_in_no_spec_event_log_or_answer(
    client: httpx.AsyncClient, db: Database
) -> None:
    response = await client.post("/api/v1/jobs", content=OPENPAI, headers=YAML)
    assert response.status_code == 201
    job_id = response.json()["id"]
    assert SECRET not in response.text
    for path in (f"/api/v1/jobs/{job_id}", "/api/v1/jobs", f"/api/v1/jobs/{job_id}/attempts"):
        answer = await client.get(path)
        assert answer.status_code == 200
        assert SECRET not in answer.text
    assert SECRET not in await _everything_stored(db)
    [row] = await db.fetch("SELECT job_id, name, value FROM api.job_secrets")
    assert (row["job_id"], row["name"], row["value"]) == (job_id, "CORRAL_SECRET_HF_TOKEN", SECRET)


async def test_a_refused_openpai_job_does_not_echo_its_secret(
    client: httpx.AsyncClient, db: Database
) -> None:
    bad = OPENPAI.replace("gpu: 1\n", "gpu: 100000\n")
    response = await client.post("/api/v1/jobs", content=bad, headers=YAML)
    assert response.status_code == 422
    assert SECRET not in response.text
    assert await _counts(db) == (0, 0, 0)


def _openpai(**changes: Any) -> str:
    document: dict[str, Any] = yaml.safe_load(OPENPAI)
    for path, value in changes.items():
        target: Any = document
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
    return yaml.safe_dump(document)


DELETE = object()

BAD_PROTOCOL = [
    pytest.param(
        _openpai(extras={"com.microsoft.pai.runtimeplugin": [{"plugin": "tensorboard"}]}),
        "extras.com.microsoft.pai.runtimeplugin.0.plugin",
        "no runtime plugin 'tensorboard'",
        id="runtime-plugin",
    ),
    pytest.param(_openpai(type="service"), "type", "job", id="not-a-job"),
    pytest.param(_openpai(taskRoles__master__commands=[]), "taskRoles.master.commands", "", id="no-commands"),
    pytest.param(
        _openpai(taskRoles__master__dockerImage="nope"),
        "taskRoles.master.dockerImage",
        "no prerequisite",
        id="unknown-image",
    ),
    pytest.param(
        _openpai(
            prerequisites=[
                *yaml.safe_load(OPENPAI)["prerequisites"],
                {"name": "d", "type": "data", "uri": ["hdfs://x"]},
            ]
        ),
        "prerequisites.1.uri.0",
        "cannot fetch hdfs://",
        id="hdfs-data",
    ),
    pytest.param(
        _openpai(prerequisites__0__auth={"username": "u", "password": "p"}),
        "prerequisites.0.auth",
        "own registry credentials",
        id="registry-auth",
    ),
    pytest.param(
        _openpai(taskRoles__master__resourcePerInstance__gpu=100_000),
        "taskRoles.master.resourcePerInstance.gpu",
        "less than or equal",
        id="absurd-gpus",
    ),
    pytest.param(
        _openpai(taskRoles__master__resourcePerInstance__gpu="two"),
        "taskRoles.master.resourcePerInstance.gpu",
        "integer",
        id="gpus-not-a-number",
    ),
    pytest.param(
        _openpai(taskRoles__master__resourcePerInstance__memoryMB=DELETE),
        "taskRoles.master.resourcePerInstance.memoryMB",
        "missing",
        id="no-memory",
    ),
    pytest.param(
        _openpai(taskRoles__master__resourcePerInstance__ports={"_x": 1}),
        "taskRoles.master.resourcePerInstance.ports",
        "port label",
        id="bad-port-label",
    ),
    pytest.param(
        _openpai(taskRoles__master__completion__minSucceededInstances=5),
        "taskRoles",
        "min_succeeded",
        id="more-successes-than-instances",
    ),
    pytest.param(
        _openpai(taskRoles__master__taskRetryCount=3),
        "taskRoles.master.taskRetryCount",
        "",
        id="task-retries",
    ),
    pytest.param(
        _openpai(taskRoles__master__commands=["echo <% $parameters.missing %>"]),
        "taskRoles.master.commands",
        "does not define",
        id="unknown-parameter",
    ),
    pytest.param(
        _openpai(taskRoles__master__commands=["echo <% $secrets.missing %>"]),
        "taskRoles.master.commands",
        "does not define",
        id="unknown-secret",
    ),
    pytest.param(
        _openpai(taskRoles__master__commands=["echo <%# section %>"]),
        "taskRoles.master.commands",
        "not a reference",
        id="mustache-section",
    ),
    pytest.param(_openpai(jobRetryCount=1000), "jobRetryCount", "less than or equal", id="too-many-retries"),
    pytest.param(
        _openpai(extras__hivedScheduler__jobPriorityClass="urgent"),
        "extras.hivedScheduler.jobPriorityClass",
        "",
        id="unknown-priority-class",
    ),
    pytest.param(
        _openpai(defaults__virtualCluster="../etc"), "defaults.virtualCluster", "pattern", id="vc-path"
    ),
    pytest.param(_openpai(defaults__deployment="nope"), "defaults.deployment", "no deployment", id="deploy"),
    pytest.param(_openpai(name="a" * 100), "name", "at most 64", id="long-name"),
    pytest.param(_openpai(name="../x"), "name", "", id="path-in-name"),
    pytest.param(
        OPENPAI.replace("  master:\n", "  Master:\n").replace("master: {skuType", "Master: {skuType"),
        "taskRoles.Master",
        "lower case",
        id="upper-case-role",
    ),
    pytest.param(_openpai(protocolVersion=3), "protocolVersion", "", id="protocol-3"),
]


@pytest.mark.parametrize(("body", "field", "says"), BAD_PROTOCOL)
async def test_a_bad_openpai_job_is_a_422_naming_the_protocol_field(
    client: httpx.AsyncClient, db: Database, body: str, field: str, says: str
) -> None:
    response = await client.post("/api/v1/jobs", content=body, headers=YAML)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("/invalid-input")
    assert any(e["field"].startswith(field) and says in e["message"] for e in problem["errors"]), problem
    assert field in problem["detail"]
    assert SECRET not in response.text
    assert await _counts(db) == (0, 0, 0)


def _bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for n in range(1, levels + 1):
        lines.append(f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


HOSTILE_YAML = [
    pytest.param(_bomb(), "alias", id="billion-laughs"),
    pytest.param("name: " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper", id="deep-nesting"),
    pytest.param("name: a\nname: b\ntasks: []\n", "given twice", id="duplicate-key"),
    pytest.param("name: a\n1: b\n", "not a string", id="integer-key"),
    pytest.param("name: a\n? [x, y]\n: z\n", "not a string", id="complex-key"),
    pytest.param("!!python/object/apply:os.system ['true']\n", "constructor", id="python-tag"),
    pytest.param("name: a\n---\nname: b\n", "more than one", id="two-documents"),
    pytest.param("name: [\n", "not valid YAML", id="truncated"),
    pytest.param("tasks:\n" + "  - x\n" * 60_000, "more than", id="too-many-values"),
    pytest.param("name: *undefined\n", "undefined alias", id="undefined-alias"),
]


@pytest.mark.parametrize(("body", "says"), HOSTILE_YAML)
async def test_hostile_yaml_is_a_400_problem_and_stores_nothing(
    client: httpx.AsyncClient, db: Database, body: str, says: str
) -> None:
    response = await client.post("/api/v1/jobs", content=body.encode(), headers=YAML)
    assert response.status_code in (400, 413), response.text
    assert response.headers["content-type"] == "application/problem+json"
    if response.status_code == 400:
        assert response.json()["type"].endswith("/malformed-yaml")
        assert says in response.json()["detail"], response.json()["detail"]
    assert await _counts(db) == (0, 0, 0)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param("- 1\n- 2\n", "body", id="a-list"),
        pytest.param("", "body", id="empty"),
        pytest.param(
            "name: hello\ntasks: [{name: main, command: 'echo'}]\ncolour: blue\n", "colour", id="extra"
        ),
        pytest.param(
            "name: hello\ntasks: [{name: main, command: 'echo', instances: 1.5}]\n", "tasks.0", id="frac"
        ),
    ],
)
async def test_a_yaml_spec_that_is_wrong_is_a_422_naming_the_field(
    client: httpx.AsyncClient, db: Database, body: str, field: str
) -> None:
    response = await client.post("/api/v1/jobs", content=body, headers=YAML)
    assert response.status_code == 422, response.text
    assert any(e["field"].startswith(field) for e in response.json()["errors"]), response.text
    assert await _counts(db) == (0, 0, 0)


async def test_a_chunked_body_over_the_limit_is_a_413(client: httpx.AsyncClient, db: Database) -> None:
    async def chunks() -> Any:
        for _ in range(100):
            yield b"# " + b"x" * 1000 + b"\n"

    response = await client.post("/api/v1/jobs", content=chunks(), headers=YAML)
    assert response.status_code == 413
    assert "at most 65536 bytes" in response.json()["detail"]
    assert await _counts(db) == (0, 0, 0)


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "multipart/form-data"])
async def test_other_media_types_are_a_415_that_names_both_formats(
    client: httpx.AsyncClient, content_type: str
) -> None:
    response = await client.post("/api/v1/jobs", content=b"name: x", headers={"content-type": content_type})
    assert response.status_code == 415
    assert "application/yaml" in response.json()["detail"]


async def test_json_constants_and_deep_json_are_refused(client: httpx.AsyncClient, db: Database) -> None:
    for body in (b'{"name": NaN}', b"[" * 100_000 + b"]" * 100_000):
        response = await client.post(
            "/api/v1/jobs", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code in (400, 413), response.text
    assert await _counts(db) == (0, 0, 0)


async def test_the_openapi_document_describes_json_and_yaml_bodies(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    content = document["paths"]["/api/v1/jobs"]["post"]["requestBody"]["content"]
    assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/JobSpec"}
    assert "application/yaml" in content
    assert "JobSpec" in document["components"]["schemas"]
    assert json.dumps(document)  # the whole document serialises
