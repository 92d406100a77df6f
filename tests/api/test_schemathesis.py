"""Schemathesis over the API's own OpenAPI document: every check, every phase.

The real app on a real port, on a real Postgres and NATS, as two callers, each on an API
and a database of its own so that neither run changes the other's world: the bootstrap
admin and a plain user (``alice``, no groups). Schemathesis runs as its command line
does (``schemathesis run``), with all of its checks (no 5xx; every status, content type,
header and body as documented; schema-violating requests refused and schema-valid ones
accepted; 405 with ``Allow`` for a method a path lacks; no answer without the token the
document asks for; a created resource there, a deleted one gone) over its four phases:
the document's examples, the coverage phase's boundary values and missing or wrong
parameters, fuzzing (valid requests and, as its negative mode, requests that break the
schema), and the stateful phase, which follows the links it infers between operations
(create a webhook, then read, rotate and delete it). Deterministic: a failure here is a
bug to fix in the API or its document, not bad luck, and the output says how to replay
it.

Accepted as it stands: a 422 for a request the schema allows, from the operations in
``RULES_THE_SCHEMA_CANNOT_STATE``, whose rules depend on the time or on what is stored;
each is in the operation's own 422 description, which the test checks.

Left out: ``streamEvents`` (an SSE stream never ends; ``test_events_api.py`` covers its
bad input) and ``dryRunJob`` (it asks a running scheduler; its input checks are the
submit's, which this run exercises); and, for the user, ``revokeToken``: the stateful
phase finds the user's own token in ``listTokens`` and revokes it, after which every
answer would be a 401 (the admin's bootstrap token cannot be revoked; the admin's run
covers the operation). Each run ends by checking its token still works.

Bounded: ``MAX_EXAMPLES`` per operation and phase (under a minute a caller on the
2-core development machine; ``CORRAL_SCHEMATHESIS_EXAMPLES=200`` for a deeper hunt, which
can take ``createSilence``'s 202 for a silence that was never made: the alerter makes
it, and none runs here).
The server runs in a thread with its own event loop, schemathesis in a process of its
own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest
import uvicorn

from corral.local.ports import free_port
from services.api.app import create_app
from services.api.events.hub import EventHub
from services.api.events.repository import EventRepository
from services.api.events.scope import Scopes
from services.api.settings import ApiSettings, Settings
from services.api.tenants.auth import bootstrap_admin, hash_token, load_or_create_admin_token, upsert_token
from services.api.tenants.repository import TenantRepository
from shared.bus.nats import NatsBus
from shared.db.pool import connect
from shared.service import Health
from shared.settings import DatabaseSettings, NatsSettings
from tests.conftest import TEMPLATE
from tests.infra import PostgresServer, nats_server, unique_name
from tests.openapi_snapshot import api_document

# Two full schemathesis runs (about 80 s): out of the fast loop, in `make test`.
pytestmark = pytest.mark.slow

MAX_EXAMPLES = int(os.environ.get("CORRAL_SCHEMATHESIS_EXAMPLES", "45"))
LEFT_OUT = ["streamEvents", "dryRunJob"]
PHASES = "examples,coverage,fuzzing,stateful"
# Operation -> what in its 422 description names the rule (see the module's docstring).
RULES_THE_SCHEMA_CANNOT_STATE = {
    "listJobs": "`cursor` is not one this API handed out",
    "submitJob": "Idempotency-Key was used for another request",
    "createToken": "`expires_at` is in the past or more than a year away",
    "createSilence": "it ends before it starts or is over already",
    "createWebhook": "the virtual cluster does not exist",
    "putVirtualCluster": "`allowed_groups` names a group that does not exist",
    # A storage's source depends on its kind; its groups must exist.
    "putStorage": "`source` does not suit `kind`",
    "registerModelVersion": "the source job is not yours, did not succeed",
    # A service's port must be one of its role's port labels: a rule across two fields.
    "createService": "the service's port is not a port label of its role",
    "updateServiceSpec": "the service's port is not a port label of its role",
}
# Schemathesis' own list of what answers a schema-valid request may get, and 422.
ACCEPTED_WITH_A_RULE = ["2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"]


@dataclass
class Served:
    url: str
    caller: str
    token: str


def _serve(
    database_url: str,
    nats_url: str,
    token_file: Path,
    caller: str,
    ready: threading.Event,
    stopping: threading.Event,
    served: list[Served],
) -> None:
    """The API with its pool, bus and event hub (job histories read JetStream), in this
    thread's own event loop, until ``stopping``."""

    async def main() -> None:
        db = await connect(DatabaseSettings(url=database_url, pool_max_size=10))
        bus = await NatsBus.connect(NatsSettings(url=nats_url))
        try:
            await bus.ensure_streams()
            tenants = TenantRepository(db)
            await bootstrap_admin(tenants, token_file)
            await upsert_token(tenants, "tok-alice", "alice", hash_token("crl_alice"), "user", "alice")
            # No rate limit (tests/api has its own tests): its 429s, which come sooner
            # the more operations there are, would crowd out the answers checked here.
            unlimited = ApiSettings(rate_limit_per_s=0, submit_rate_limit_per_s=0)
            hub = EventHub(bus.js, Scopes(EventRepository(db)))
            app = create_app(db, Health("api", {"postgres": db.ping}), Settings(api=unlimited), None, hub)
            port = free_port()
            config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
            server = uvicorn.Server(config)
            tokens = {"admin": load_or_create_admin_token(token_file), "user": "crl_alice"}
            served.append(Served(f"http://127.0.0.1:{port}", caller, tokens[caller]))
            serving = asyncio.create_task(server.serve())
            ready.set()
            await asyncio.to_thread(stopping.wait)
            server.should_exit = True
            await serving
        finally:
            await bus.close()
            await db.close()

    asyncio.run(main())


def _wait_healthy(url: str) -> None:
    for _ in range(300):
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(url + "/healthz").status_code == 200:
                return
        time.sleep(0.05)
    raise RuntimeError("the API did not answer /healthz")


@pytest.fixture(scope="module", params=["admin", "user"])
def served(
    request: pytest.FixtureRequest, pg: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    name = unique_name("st")

    async def database(sql: str) -> None:
        admin = await asyncpg.connect(pg.url("postgres"))
        try:
            await admin.execute(sql)
        finally:
            await admin.close()

    asyncio.run(database(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}"))
    with nats_server() as nats_url:
        ready, stopping, out = threading.Event(), threading.Event(), list[Served]()
        token_file = tmp_path_factory.mktemp("schemathesis") / "admin-token"
        args = (pg.url(name), nats_url, token_file, request.param, ready, stopping, out)
        thread = threading.Thread(target=_serve, args=args)
        thread.start()
        try:
            assert ready.wait(30), "the API did not start"
            _wait_healthy(out[0].url)
            yield out[0]
        finally:
            stopping.set()
            thread.join(30)
    asyncio.run(database(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def _config(directory: Path) -> Path:
    """A ``schemathesis.toml`` accepting a 422 from the operations whose rules the schema
    cannot state (their own 422 description says which), and only from those."""
    lines = []
    for operation in sorted(RULES_THE_SCHEMA_CANNOT_STATE):
        lines += [
            "[[operations]]",
            f"include-operation-id = {json.dumps(operation)}",
            f"checks.positive_data_acceptance.expected-statuses = {json.dumps(ACCEPTED_WITH_A_RULE)}",
            "",
        ]
    path = directory / "schemathesis.toml"
    path.write_text("\n".join(lines))
    return path


def test_every_rule_the_schema_cannot_state_is_in_its_422_description() -> None:
    document = api_document()
    operations = {op["operationId"]: op for path in document["paths"].values() for op in path.values()}
    for operation, rule in RULES_THE_SCHEMA_CANNOT_STATE.items():
        assert rule in operations[operation]["responses"]["422"]["description"], operation


@pytest.mark.timeout(300)
def test_every_check_and_phase_passes(served: Served, tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(_config(tmp_path)),
        "run", served.url + "/openapi.json",
        "--checks", "all",
        "--phases", PHASES,
        "--max-examples", str(MAX_EXAMPLES),
        "--generation-deterministic",
        "--workers", "1",
        "--request-timeout", "30",
        "--header", f"Authorization: Bearer {served.token}",
        "--no-color",
    ]  # fmt: skip
    left_out = [*LEFT_OUT, "revokeToken"] if served.caller == "user" else LEFT_OUT
    for operation in left_out:
        command += ["--exclude-operation-id", operation]
    # Its own directory: nothing it writes lands in the checkout.
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=280, check=False)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-20_000:]
    # It tested every operation but those left out, in every phase.
    summary = output[output.find("= SUMMARY =") :]
    document = httpx.get(served.url + "/openapi.json").json()
    operations = sum(len(path) for path in document["paths"].values())
    selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", summary)
    assert selected is not None, summary
    tested = operations - len(left_out)
    assert tuple(int(n) for n in selected.groups()) == (tested, operations, tested), summary
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert re.search(rf"✅ {phase}\b", summary), summary
    # Its answers were the caller's to the end, not a run of 401s.
    whoami = httpx.get(served.url + "/api/v1/whoami", headers={"Authorization": f"Bearer {served.token}"})
    assert whoami.status_code == 200, whoami.text
