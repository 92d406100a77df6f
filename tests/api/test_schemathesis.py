"""A bounded property-based run of schemathesis over the API's own OpenAPI schema.

The real app on a real port, on a real Postgres and NATS (a database of its own), with
two callers: the bootstrap admin and a plain user (``alice``, no groups). For every
operation schemathesis generates requests from the schema — valid ones and, as its
negative mode, requests that break it (wrong types, missing fields, hostile strings) —
and each answer must be no 5xx and, where the schema describes that status, conform
to it. ``derandomize`` makes the run the same every time: a failure here is a bug to
fix, not bad luck (each one found has a regression test in ``tests/api``).

Left out: ``streamEvents`` (an SSE stream never ends; ``test_events_api.py`` covers its
bad input) and ``dryRunJob`` (it asks a running scheduler; its input checks are the
submit's, which this run exercises).

Bounded: ``MAX_EXAMPLES`` per operation, caller and mode (about 90 s in all on the
2-core development machine).
The server runs in a thread with its own event loop, since schemathesis calls are
synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import BaseSchema, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import response_schema_conformance

from corral.local.ports import free_port
from services.api.app import create_app
from services.api.auth import bootstrap_admin, hash_token, load_or_create_admin_token
from services.api.repository import ApiRepository
from services.api.settings import ApiSettings, Settings
from shared.bus.nats import NatsBus
from shared.db.pool import connect
from shared.service import Health
from shared.settings import DatabaseSettings, NatsSettings
from tests.conftest import TEMPLATE
from tests.infra import PostgresServer, nats_server, unique_name

# Per operation, caller and mode; CORRAL_SCHEMATHESIS_EXAMPLES=200 for a deeper hunt.
MAX_EXAMPLES = int(os.environ.get("CORRAL_SCHEMATHESIS_EXAMPLES", "20"))
LEFT_OUT = ["streamEvents", "dryRunJob"]


@dataclass
class Served:
    url: str
    tokens: dict[str, str]


def _serve(
    database_url: str,
    nats_url: str,
    token_file: Path,
    ready: threading.Event,
    stopping: threading.Event,
    served: list[Served],
) -> None:
    """The API with its pool and bus, in this thread's own event loop, until ``stopping``."""

    async def main() -> None:
        db = await connect(DatabaseSettings(url=database_url, pool_max_size=10))
        bus = await NatsBus.connect(NatsSettings(url=nats_url))
        try:
            await bus.ensure_streams()
            repo = ApiRepository(db)
            await bootstrap_admin(repo, token_file)
            await repo.upsert_token("tok-alice", "alice", hash_token("crl_alice"), "user", "alice")
            # No rate limit (tests/api has its own tests): its 429s, which come sooner
            # the more operations there are, would crowd out the answers checked here.
            unlimited = ApiSettings(rate_limit_per_s=0, submit_rate_limit_per_s=0)
            app = create_app(repo, Health("api", {"postgres": db.ping}), Settings(api=unlimited))
            port = free_port()
            config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
            server = uvicorn.Server(config)
            tokens = {"admin": load_or_create_admin_token(token_file), "user": "crl_alice"}
            served.append(Served(f"http://127.0.0.1:{port}", tokens))
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


@pytest.fixture(scope="module")
def served(pg: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
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
        args = (pg.url(name), nats_url, token_file, ready, stopping, out)
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


BOUNDED = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def _failures(schema: BaseSchema, token: str, mode: GenerationMode, statuses: Counter[int]) -> list[str]:
    """Run every operation's bounded property test; what failed, one line each. Counts
    the answers by class (2, 4, 5) into ``statuses``."""
    failures = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # the schema itself is valid
        operation = result.ok()
        if operation.definition.raw.get("operationId") in LEFT_OUT:
            continue

        @BOUNDED
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case[Any]) -> None:
            headers = {"Authorization": f"Bearer {token}"}
            response = case.call(headers=headers, timeout=30)
            statuses[response.status_code // 100] += 1
            case.validate_response(
                response, checks=[not_a_server_error, response_schema_conformance], headers=headers
            )

        try:
            check()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue  # nothing in this operation can be sent wrong (no parameters, free-text ids)
        except Exception as exc:  # every operation runs; all failures are reported together
            failures.append(f"{operation.label}: {str(exc).strip()[:2000]}")
    return failures


@pytest.mark.timeout(300)
@pytest.mark.parametrize("caller", ["admin", "user"])
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=str)
def test_no_server_error_and_every_answer_matches_the_schema(
    served: Served, caller: str, mode: GenerationMode
) -> None:
    schema = schemathesis.openapi.from_url(served.url + "/openapi.json")
    statuses: Counter[int] = Counter()
    failures = _failures(schema, served.tokens[caller], mode, statuses)
    assert not failures, "\n\n".join(failures)
    # The run reached the routes: valid requests were served, invalid ones refused.
    assert statuses[4] > 50, statuses
    if mode is GenerationMode.POSITIVE:
        assert statuses[2] > 50, statuses
