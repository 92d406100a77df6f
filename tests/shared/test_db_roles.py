"""Least privilege in Postgres: each service's role may do what its SQL does and nothing
more, and a node agent's role may only call its node's functions, for its own node.

Every test here tries to break a promise (a ``permission denied``, another node's attempt,
a forged event) or shows that the role does what its service needs. The table
``EXPECTED`` is the whole grant matrix: a table, view, sequence or function added
without a decision about who may use it fails ``test_every_object_has_a_grant_decision``.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from services.launcher.agent.repository import SQL as NODE_SQL
from services.launcher.agent.repository import NodeRepository
from services.launcher.reporting import exited_event, started_events
from shared.bus.memory import MemoryBus
from shared.db.credentials import (
    SERVICE_ROLES,
    SecretFileProblem,
    mint_node_credential,
    read_secret_file,
    revoke_node_credential,
    write_secret_file,
)
from shared.db.migrations import apply_migrations
from shared.db.pool import Database, connect
from shared.db.queries import Queries
from shared.deadletters import PostgresDeadLetters
from shared.events import JobRunning, TaskOverLimit, TaskStarted
from shared.events.jobs import TaskOverLimitData
from shared.liveness import Liveness
from shared.outbox import OutboxRelay, append, outbox_row
from shared.outbox.rows import partitions_of, sources_published_with
from shared.outbox.writing import change_with_event_statement
from shared.settings import DatabaseSettings
from tests.infra import PostgresServer, unique_name
from tests.launcher import attempts
from tests.shared.outbox_helpers import make_event

ROOT = Path(__file__).resolve().parents[2]
ROLES = tuple(SERVICE_ROLES.values())  # api, scheduler, launcher, monitor, alerter, agent
AGENT = "corral/agent"

# Who may do what, object by object, in the order of ROLES. Tables and views: S(ELECT)
# I(NSERT) U(PDATE) D(ELETE); sequences: U(SAGE); functions: (e)X(ecute). A new object
# needs its line here, and the grants that make it true in a migration.
EXPECTED: dict[str, tuple[str, str, str, str, str, str]] = {
    #                                   api     sched   launch  monitor alerter agent
    "alerter.alert_transitions":        ("S",    "",     "",     "",     "I",    ""),
    "alerter.alert_transitions_id_seq": ("",     "",     "",     "",     "U",    ""),
    "alerter.alerts":                   ("S",    "",     "",     "",     "SIU",  ""),
    "alerter.notification_groups":      ("",     "",     "",     "",     "SIU",  ""),
    "alerter.notifications":            ("",     "",     "",     "",     "SIU",  ""),
    "alerter.notifications_id_seq":     ("",     "",     "",     "",     "U",    ""),
    "alerter.rule_overrides":           ("S",    "",     "",     "",     "SIU",  ""),
    "alerter.rules_in_force":           ("S",    "",     "",     "",     "SIU",  ""),
    "alerter.silences":                 ("S",    "",     "",     "",     "SIU",  ""),
    "api.audit_log":                    ("SID",  "",     "",     "",     "",     ""),
    "api.audit_log_id_seq":             ("U",    "",     "",     "",     "",     ""),
    "api.bus_credentials":              ("SIU",  "",     "",     "",     "",     ""),
    "api.group_members":                ("SID",  "",     "",     "",     "",     ""),
    "api.groups":                       ("SIUD", "",     "",     "",     "",     ""),
    "api.idempotency_keys":             ("SIUD", "",     "",     "",     "",     ""),
    "api.join_tokens":                  ("SIU",  "",     "",     "",     "",     ""),
    "api.portal_sessions":              ("SID",  "",     "",     "",     "",     ""),
    "api.interactive_sessions":         ("SIUD", "",     "",     "",     "",     ""),
    "api.job_secrets":                  ("SI",   "",     "S",    "",     "",     ""),
    "api.job_inputs":                   ("SI",   "",     "S",    "",     "",     ""),
    "api.jobs":                         ("SIU",  "SU",   "SU",   "",     "S",    ""),
    "api.model_versions":               ("SI",   "",     "",     "",     "",     ""),
    "api.models":                       ("SIU",  "",     "",     "",     "",     ""),
    "api.service_replicas":             ("SIUD", "S",    "S",    "",     "",     ""),
    "api.services":                     ("SIUD", "S",    "S",    "",     "",     ""),
    "api.storage_configs":              ("SIUD", "",     "S",    "",     "",     ""),
    "api.storage_groups":               ("SIUD", "",     "",     "",     "",     ""),
    "api.tokens":                       ("SIU",  "",     "",     "",     "",     ""),
    "api.user_ssh_keys":                ("SIUD", "",     "",     "",     "",     ""),
    "api.users":                        ("SIUD", "",     "",     "",     "",     ""),
    "api.virtual_clusters":             ("SIUD", "S",    "",     "",     "",     ""),
    "api.webhook_attempts":             ("SI",   "",     "",     "",     "",     ""),
    "api.webhook_attempts_id_seq":      ("U",    "",     "",     "",     "",     ""),
    "api.webhook_deliveries":           ("SIU",  "",     "",     "",     "",     ""),
    "api.webhook_deliveries_id_seq":    ("U",    "",     "",     "",     "",     ""),
    "api.webhook_secrets":              ("SIU",  "",     "",     "",     "",     ""),
    "api.webhook_secrets_id_seq":       ("U",    "",     "",     "",     "",     ""),
    "api.webhooks":                     ("SIUD", "",     "",     "",     "",     ""),
    "corral.dead_letters":              ("I",    "I",    "I",    "I",    "I",    ""),
    "corral.dead_letters_id_seq":       ("U",    "U",    "U",    "U",    "U",    ""),
    "corral.outbox":                    ("SIUD", "SIUD", "SIUD", "SIUD", "SIUD", ""),
    "corral.outbox_id_seq":             ("U",    "U",    "U",    "U",    "U",    ""),
    "corral.processed_events":          ("",     "",     "SID",  "SID",  "SID",  ""),
    "corral.schema_migrations":         ("",     "",     "",     "",     "",     ""),
    "corral.service_instances":         ("SIUD", "SIUD", "SIUD", "SIUD", "SIUD", ""),
    "launcher.agents":                  ("S",    "S",    "SIU",  "",     "",     ""),
    "launcher.attempts":                ("S",    "S",    "SIU",  "S",    "S",    ""),
    "launcher.artifacts":               ("S",    "",     "SI",   "",     "",     ""),
    "launcher.job_ssh_keys":            ("",     "",     "SID",  "",     "",     ""),
    "launcher.node_credentials":        ("SIU",  "",     "",     "",     "",     ""),
    "launcher.task_outputs":            ("S",    "",     "SIU",  "",     "",     ""),
    "monitor.gpu_history":              ("S",    "",     "",     "SIUD", "S",    ""),
    "monitor.job_gpu_usage_daily":      ("S",    "",     "",     "SIUD", "",     ""),
    "monitor.job_gpu_usage_mark":       ("S",    "",     "",     "SU",   "",     ""),
    "monitor.gpu_readings":             ("S",    "S",    "",     "SIUD", "",     ""),
    "monitor.gpu_status":               ("S",    "",     "",     "S",    "",     ""),
    "monitor.gpus":                     ("S",    "S",    "",     "SIUD", "",     ""),
    "monitor.health_events":            ("S",    "",     "",     "I",    "",     ""),
    "monitor.health_events_id_seq":     ("",     "",     "",     "U",    "",     ""),
    "monitor.nodes":                    ("S",    "S",    "S",    "SIU",  "",     ""),
    "scheduler.allocations":            ("S",    "SIU",  "S",    "",     "S",    ""),
    "scheduler.pending_status":         ("S",    "SIUD", "",     "",     "S",    ""),
    "scheduler.preemptions":            ("",     "SI",   "S",    "",     "",     ""),
    "scheduler.queue_order":            ("",     "SIU",  "",     "",     "",     ""),
    "scheduler.queue_positions":        ("S",    "",     "",     "",     "S",    ""),
    # The node agent's functions (each checks the node's secret), and their helpers.
    "launcher.check_node()":            ("",     "",     "",     "",     "",     ""),
    "launcher.check_node_attempt()":    ("",     "",     "",     "",     "",     ""),
    "launcher.check_node_event()":      ("",     "",     "",     "",     "",     ""),
    "launcher.node_attempt_states()":   ("",     "",     "",     "",     "",     "X"),
    "launcher.node_attempt_ssh()":      ("",     "",     "",     "",     "",     "X"),
    "launcher.node_attempt_storage()":  ("",     "",     "",     "",     "",     "X"),
    "launcher.node_beat()":             ("",     "",     "",     "",     "",     "X"),
    "launcher.node_claim_attempt()":    ("",     "",     "",     "",     "",     "X"),
    "launcher.node_expired_task_logs()": ("",    "",     "",     "",     "",     "X"),
    "launcher.node_goodbye()":          ("",     "",     "",     "",     "",     "X"),
    "launcher.node_live_attempts()":    ("",     "",     "",     "",     "",     "X"),
    "launcher.node_mark_exited()":      ("",     "",     "",     "",     "",     "X"),
    "launcher.node_mark_running()":     ("",     "",     "",     "",     "",     "X"),
    "launcher.node_record_dead_letter()": ("",   "",     "",     "",     "",     "X"),
    "launcher.node_record_gpu_use()":   ("",     "",     "",     "",     "",     "X"),
    "launcher.node_register()":         ("",     "",     "",     "",     "",     "X"),
    "launcher.node_renew_lease()":      ("",     "",     "",     "",     "",     "X"),
    "launcher.node_report_over_limit()": ("",    "",     "",     "",     "",     "X"),
    "launcher.node_set_readiness()":    ("",     "",     "",     "",     "",     "X"),
}  # fmt: skip

CORRAL_SCHEMAS = ["api", "scheduler", "launcher", "monitor", "alerter", "corral"]
_RELATIONS = """
SELECT n.nspname || '.' || c.relname AS name,
       array_agg(CASE WHEN c.relkind = 'S'
                      THEN concat_ws('', CASE WHEN has_sequence_privilege(r, c.oid, 'USAGE') THEN 'U' END,
                                         CASE WHEN has_sequence_privilege(r, c.oid, 'SELECT') THEN 'S' END,
                                         CASE WHEN has_sequence_privilege(r, c.oid, 'UPDATE') THEN 'W' END)
                      ELSE concat_ws('', CASE WHEN has_table_privilege(r, c.oid, 'SELECT') THEN 'S' END,
                                         CASE WHEN has_table_privilege(r, c.oid, 'INSERT') THEN 'I' END,
                                         CASE WHEN has_table_privilege(r, c.oid, 'UPDATE') THEN 'U' END,
                                         CASE WHEN has_table_privilege(r, c.oid, 'DELETE') THEN 'D' END,
                                         CASE WHEN has_table_privilege(r, c.oid, 'TRUNCATE') THEN 'T' END,
                                         CASE WHEN has_table_privilege(r, c.oid, 'REFERENCES') THEN 'R' END,
                                         CASE WHEN has_table_privilege(r, c.oid, 'TRIGGER') THEN 'G' END)
                 END ORDER BY ord) AS privileges
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
     unnest($1::text[]) WITH ORDINALITY AS roles(r, ord)
WHERE n.nspname = ANY($2::text[]) AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
GROUP BY 1"""
_FUNCTIONS = """
SELECT n.nspname || '.' || p.proname || '()' AS name,
       array_agg(CASE WHEN has_function_privilege(r, p.oid, 'EXECUTE') THEN 'X' ELSE '' END
                 ORDER BY ord) AS privileges
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
     unnest($1::text[]) WITH ORDINALITY AS roles(r, ord)
WHERE n.nspname = ANY($2::text[])
GROUP BY p.oid, n.nspname, p.proname"""


async def test_every_object_has_a_grant_decision(db: Database) -> None:
    found: dict[str, tuple[str, ...]] = {}
    for query in (_RELATIONS, _FUNCTIONS):
        for row in await db.fetch(query, list(ROLES), CORRAL_SCHEMAS):
            assert row["name"] not in found, f"{row['name']} is overloaded: name each function once"
            found[row["name"]] = tuple(row["privileges"])
    undecided = sorted(set(found) - set(EXPECTED))
    assert not undecided, (
        f"{', '.join(undecided)}: no grant decision. Grant each service role what its SQL does with "
        "it (and nothing to the others) in a migration, and add its line to EXPECTED in "
        "tests/shared/test_db_roles.py"
    )
    assert sorted(set(EXPECTED) - set(found)) == [], "EXPECTED names objects that no longer exist"
    differing = {
        name: dict(zip(ROLES, found[name], strict=True))
        for name in sorted(found)
        if found[name] != EXPECTED[name]
    }
    assert not differing, f"privileges differ from EXPECTED (grant or revoke in a migration): {differing}"


async def test_the_roles_hold_nothing_but_their_grants(db: Database) -> None:
    """No login, no attribute, no membership: nothing inherited by default. (A login is
    given where the cluster is run: ``make up``, or its operator.)"""
    rows = await db.fetch(
        """SELECT r.rolname, r.rolsuper, r.rolcreaterole, r.rolcreatedb, r.rolbypassrls, r.rolreplication,
                  (SELECT count(*) FROM pg_auth_members m WHERE m.member = r.oid) AS memberships
           FROM pg_roles r WHERE r.rolname = ANY($1::text[]) ORDER BY r.rolname""",
        list(ROLES),
    )
    assert sorted(row["rolname"] for row in rows) == sorted(ROLES)
    for row in rows:
        assert not any(row[k] for k in ("rolsuper", "rolcreaterole", "rolcreatedb", "rolbypassrls")), row
        assert not row["rolreplication"], row
        assert row["memberships"] == 0, row


async def test_databases_of_one_cluster_migrate_side_by_side(pg: PostgresServer) -> None:
    """The roles are the cluster's: several new databases migrating at once all get them."""
    names = [unique_name("roles") for _ in range(3)]
    admin = await asyncpg.connect(pg.url("postgres"))
    try:
        for name in names:
            await admin.execute(f"CREATE DATABASE {name}")

        async def migrate(name: str) -> list[int]:
            db = await connect(DatabaseSettings(url=pg.url(name), pool_max_size=2))
            try:
                return await apply_migrations(db)
            finally:
                await db.close()

        applied = await asyncio.gather(*(migrate(name) for name in names))
        assert all(versions and versions == applied[0] for versions in applied)
    finally:
        for name in names:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


# --- what each role must not do --------------------------------------------------------

FORBIDDEN = [
    ("corral_api", "UPDATE launcher.attempts SET state = 'LOST'"),
    ("corral_api", "UPDATE scheduler.allocations SET released_at = now()"),
    ("corral_api", "UPDATE monitor.nodes SET state = 'DRAINED'"),
    ("corral_api", "UPDATE alerter.alerts SET state = 'resolved'"),
    ("corral_api", "UPDATE launcher.agents SET lost_at = now()"),
    ("corral_scheduler", "SELECT * FROM api.tokens"),
    ("corral_scheduler", "SELECT * FROM api.job_secrets"),
    ("corral_scheduler", "UPDATE launcher.attempts SET state = 'LOST'"),
    ("corral_launcher", "SELECT * FROM api.tokens"),
    ("corral_launcher", "SELECT * FROM api.webhook_secrets"),
    ("corral_launcher", "INSERT INTO scheduler.allocations (job_id) VALUES ('j')"),
    ("corral_launcher", "SELECT secret_sha256 FROM launcher.node_credentials"),
    ("corral_launcher", "SELECT launcher.node_live_attempts('node-a', NULL)"),
    ("corral_monitor", "UPDATE api.jobs SET state = 'FAILED'"),
    ("corral_monitor", "SELECT * FROM api.tokens"),
    ("corral_monitor", "SELECT * FROM api.job_secrets"),
    ("corral_alerter", "SELECT * FROM api.webhook_secrets"),
    ("corral_alerter", "SELECT * FROM api.tokens"),
    ("corral_alerter", "UPDATE api.jobs SET state = 'FAILED'"),
    ("corral_agent", "SELECT * FROM launcher.attempts"),
    ("corral_agent", "SELECT * FROM api.tokens"),
    ("corral_agent", "SELECT * FROM api.jobs"),
    ("corral_agent", "SELECT * FROM api.job_secrets"),
    ("corral_agent", "SELECT * FROM corral.outbox"),
    ("corral_agent", "INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload) VALUES ('e', 's', 'a', 0, '')"),  # noqa: E501
    ("corral_agent", "SELECT * FROM launcher.node_credentials"),
    ("corral_agent", "UPDATE launcher.agents SET lost_at = NULL"),
    ("corral_agent", "SELECT launcher.check_node('node-a', NULL)"),
    ("corral_agent", "SELECT launcher.check_node_attempt('node-a', 'att-1')"),
]  # fmt: skip


@pytest.mark.parametrize(("role", "statement"), FORBIDDEN, ids=lambda v: v.split(" FROM")[0][:40])
async def test_a_role_is_refused_what_its_service_does_not_do(
    db: Database, role: str, statement: str
) -> None:
    async with db.transaction() as conn:
        await conn.execute(f"SET LOCAL ROLE {role}")
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
            await conn.execute(statement)


# --- logging in as a role --------------------------------------------------------------


def _url_as(url: str, user: str) -> str:
    """``url`` with ``user`` and no password (it comes from a file)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


@asynccontextmanager
async def login_as(db: Database, url: str, role: str, tmp_path: Path) -> AsyncIterator[Database]:
    """A pool logged in, with a password from a 0600 file, as a login role of this test's
    own that is a member of ``role`` (roles are the cluster's, shared with every test:
    their own logins are left alone)."""
    user = unique_name("login")
    password = secrets.token_urlsafe(24)
    password_file = tmp_path / "credentials" / user
    write_secret_file(password_file, password)
    await db.execute(f"CREATE ROLE {user} LOGIN PASSWORD '{password}' IN ROLE {role}")
    try:
        logged_in = await connect(
            DatabaseSettings(url=_url_as(url, user), password_file=password_file, pool_max_size=4), attempts=1
        )
        try:
            assert await logged_in.fetchval("SELECT current_user") == user
            yield logged_in
        finally:
            await logged_in.close()
    finally:
        await db.execute(f"DROP ROLE {user}")


@pytest.mark.slow
async def test_a_wrong_password_is_said_and_tried_again_not_a_crash(
    db: Database, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A service whose password is wrong (or whose login was revoked) logs why, backs
    off and tries again, re-reading its file: fixing the file lets it in."""
    user = unique_name("login")
    password_file = tmp_path / "credentials" / user
    write_secret_file(password_file, "not-the-password")
    await db.execute(f"CREATE ROLE {user} LOGIN PASSWORD 'the-password' IN ROLE corral_api")
    try:
        settings = DatabaseSettings(
            url=_url_as(database_url, user), password_file=password_file, pool_max_size=1
        )
        connecting = asyncio.create_task(connect(settings, attempts=1))
        await asyncio.sleep(2.5)
        assert not connecting.done(), "it gave up (or crashed) instead of trying again"
        said = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert any("Postgres refused the login" in line and str(password_file) in line for line in said), said
        assert "the-password" not in " ".join(said)
        write_secret_file(password_file, "the-password")
        logged_in = await asyncio.wait_for(connecting, 10)
        assert await logged_in.fetchval("SELECT current_user") == user
        await logged_in.close()
    finally:
        await db.execute(f"DROP ROLE {user}")


async def test_a_password_comes_from_a_file_only_its_owner_may_read(tmp_path: Path) -> None:
    path = tmp_path / "credentials" / "postgres-api"
    write_secret_file(path, "s3cret")
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert read_secret_file(path) == "s3cret"
    path.chmod(0o644)
    with pytest.raises(SecretFileProblem, match="chmod 600"):
        read_secret_file(path)
    with pytest.raises(SecretFileProblem, match="cannot read"):
        read_secret_file(tmp_path / "missing")


# --- what each service role needs ------------------------------------------------------


@dataclass(frozen=True)
class _Delivery:
    """A message a consumer gave up on, as ``run_consumer`` hands it to the dead letters."""

    subject: str
    data: bytes = b"?"
    headers: dict[str, str] = field(default_factory=dict)
    num_delivered: int = 1
    stream_seq: int | None = 3

    async def ack(self) -> None:
        return None

    async def nak(self, delay_s: float) -> None:  # noqa: ARG002
        return None

    async def term(self) -> None:
        return None


def _params(sql: str) -> int:
    return max((int(n) for n in re.findall(r"\$(\d+)", sql)), default=0)


def _service_statements(service: str) -> list[tuple[str, str]]:
    """(name, SQL) of every named query of the service (a consequence inside the
    statement that runs it), the node agent's apart."""
    statements = []
    for directory in sorted({p.parent for p in ROOT.glob(f"services/{service}/**/sql/*.sql")}):
        if directory.is_relative_to(ROOT / "services" / "launcher" / "agent"):
            continue  # the agent's: its role's, tested below
        queries = Queries(directory)
        for name in queries.names():
            sql = getattr(queries, name)
            if follows := re.search(r"^-- consequence of: (\w+)$", sql, re.MULTILINE):
                change = getattr(queries, follows[1])
                sql = change_with_event_statement(change, sql, _params(change))
            statements.append((name, sql))
    return statements


SERVICES = [service for service in SERVICE_ROLES if service != "agent"]


@pytest.mark.parametrize("service", SERVICES)
async def test_every_named_query_of_a_service_passes_its_roles_checks(db: Database, service: str) -> None:
    """EXPLAIN checks a statement's privileges as running it would, without running it."""
    refused = []
    async with db.connection() as conn:
        for name, sql in _service_statements(service):
            async with conn.transaction():
                await conn.execute(f"SET LOCAL ROLE {SERVICE_ROLES[service]}")
                statement = await conn.prepare(sql)
                try:
                    await conn.fetch(f"EXPLAIN {sql}", *[None] * len(statement.get_parameters()))
                except asyncpg.InsufficientPrivilegeError as exc:
                    refused.append(f"{name}: {exc}")
    assert not refused, f"{service}'s role is refused: {refused}; grant it in a migration"


@pytest.mark.parametrize("service", SERVICES)
async def test_a_service_logged_in_as_its_role_runs_the_common_runtime(
    db: Database, database_url: str, tmp_path: Path, service: str
) -> None:
    """What every service process does: liveness, dead letters, an event through the
    outbox and its relay (publishing it, stamping it, the sweep of old rows)."""
    async with login_as(db, database_url, SERVICE_ROLES[service], tmp_path) as as_service:
        liveness = Liveness(as_service, service, 1.0)
        await liveness.beat()
        await liveness.prune()
        assert await db.fetchval("SELECT service FROM corral.service_instances") == service
        await liveness.forget()
        await PostgresDeadLetters(as_service).record(service, _Delivery("corral.job.submitted.j"), "bad")
        async with as_service.transaction() as conn:
            await append(conn, make_event("job-1"), aggregate="job-1")
        bus = MemoryBus()
        await bus.ensure_streams()
        assert await OutboxRelay(as_service, bus).relay_pending() == 1
        await OutboxRelay(as_service, bus)._delete_old_sent_rows()
    assert await db.fetchval("SELECT count(*) FROM corral.dead_letters") == 1


# --- the node agent --------------------------------------------------------------------

NODE_A, NODE_B = "node-a", "node-b"


@pytest.fixture
async def agent_db(db: Database, database_url: str, tmp_path: Path) -> AsyncIterator[Database]:
    """A pool logged in as a member of ``corral_agent``, as a node agent connects."""
    async with login_as(db, database_url, "corral_agent", tmp_path) as logged_in:
        yield logged_in


async def _job_of(db: Database, attempt_id: str) -> str:
    return str(await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id))


async def test_a_node_agent_does_what_an_agent_does_for_its_own_node(
    db: Database, agent_db: Database
) -> None:
    await attempts.known_nodes(db, NODE_A)
    first, second = await attempts.assigned(db, NODE_A, instances=2)
    job_id = await _job_of(db, first)
    await db.execute(
        "INSERT INTO api.job_secrets (job_id, name, value) VALUES ($1, 'CORRAL_SECRET_KEY', 'v')", job_id
    )
    node = NodeRepository(agent_db, NODE_A, await mint_node_credential(db, NODE_A))

    epoch = await node.register(30.0, "sandbox", "its own uid", 4)
    assert await node.renew_lease(epoch, 30.0) == epoch
    assert await node.register(30.0, "sandbox", "its own uid", 4) == epoch + 1
    assert await node.renew_lease(epoch, 30.0) is None  # the old epoch is fenced

    assert {row["id"] for row in await node.live_attempts()} == {first, second}
    claimed = await node.claim_attempt(first, epoch + 1)
    assert claimed is not None
    assert claimed["secrets"] == {"CORRAL_SECRET_KEY": "v"}
    assert {p["task_index"] for p in claimed["peers"]} == {0, 1}
    assert await node.claim_attempt(first, epoch + 1) is None  # claimed once
    assert await node.attempt_state(first) == "STARTING"

    started, running = started_events(
        AGENT, attempt_id=first, job_id=job_id, generation=1, node_id=NODE_A, pid=42
    )
    marked = await node.mark_running(first, 42, None, "/logs/first.log", started, running)
    assert marked is not None
    assert marked["job_running"]
    assert await db.fetchval("SELECT state FROM api.jobs WHERE id = $1", job_id) == "RUNNING"

    ended: asyncio.Queue[str] = asyncio.Queue()

    def heard(_conn: object, _pid: int, _channel: str, payload: object) -> None:
        ended.put_nowait(str(payload))

    async with db.connection() as listener:
        await listener.add_listener("corral_attempt_ended", heard)
        exited = exited_event(
            AGENT,
            attempt_id=first,
            job_id=job_id,
            node_id=NODE_A,
            exit_code=0,
            signal=None,
            reason="exited with code 0",
            classification="unknown",
        )
        assert await node.mark_exited(lost=False, exited=exited)
        assert not await node.mark_exited(lost=False, exited=exited)  # reported once
        said = await asyncio.wait_for(ended.get(), 5)  # the launcher decides the job
        assert said.partition(" ")[0] == job_id
        await listener.remove_listener("corral_attempt_ended", heard)
    row = await db.fetchrow(
        "SELECT state, exit_code, pid, log_path FROM launcher.attempts WHERE id = $1", first
    )
    assert dict(row or {}) == {"state": "EXITED", "exit_code": 0, "pid": 42, "log_path": "/logs/first.log"}
    subjects = [r["subject"] for r in await db.fetch("SELECT subject FROM corral.outbox ORDER BY id")]
    assert subjects[-3:] == [
        f"corral.task.started.{NODE_A}",
        f"corral.job.running.{job_id}",
        f"corral.task.exited.{NODE_A}",
    ]

    logs = await node.expired_task_logs([job_id, job_id], ["worker", "worker"], [0, 1], [1, 1], 0.0)
    assert [(row["ord"], row["job_ended"]) for row in logs] == [(1, False)]  # the second runs on

    await node.beat(f"agent-{NODE_A}@host:1:abc")
    assert await db.fetchval("SELECT service FROM corral.service_instances") == f"agent-{NODE_A}"
    await node.goodbye(f"agent-{NODE_A}@host:1:abc")
    assert await db.fetchval("SELECT count(*) FROM corral.service_instances") == 0
    await node.record_dead_letter(
        f"agent-{NODE_A}", _Delivery(f"corral.task.assigned.{NODE_A}"), "invalid event"
    )
    assert await db.fetchval("SELECT consumer FROM corral.dead_letters") == f"agent-{NODE_A}"


async def test_a_node_agent_cannot_touch_another_nodes_attempts(db: Database, agent_db: Database) -> None:
    await attempts.known_nodes(db, NODE_A, NODE_B)
    [theirs] = await attempts.assigned(db, NODE_B, instances=1)
    [running] = await attempts.assigned(db, NODE_B, instances=1, state="RUNNING")
    job_id = await _job_of(db, running)
    secret_a = await mint_node_credential(db, NODE_A)
    node_a = NodeRepository(agent_db, NODE_A, secret_a)
    epoch = await node_a.register(30.0, "sandbox", "", 4)
    started, running_event = started_events(
        AGENT, attempt_id=running, job_id=job_id, generation=1, node_id=NODE_A, pid=1
    )
    exited = exited_event(
        AGENT,
        attempt_id=running,
        job_id=job_id,
        node_id=NODE_A,
        exit_code=1,
        signal=None,
        reason="",
        classification="unknown",
    )
    refusals: list[Callable[[], object]] = [
        lambda: node_a.claim_attempt(theirs, epoch),
        lambda: node_a.mark_running(running, 1, None, None, started, running_event),
        lambda: node_a.mark_exited(lost=True, exited=exited),
    ]
    for refused in refusals:
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not one of node {NODE_A}'s"):
            await refused()  # type: ignore[misc]
    assert await node_a.live_attempts() == []
    assert await node_a.attempt_state(running) is None
    # Node A's secret does not make it node B.
    node_a_as_b = NodeRepository(agent_db, NODE_B, secret_a)
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not node {NODE_B}"):
        await node_a_as_b.live_attempts()
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not node {NODE_B}"):
        await node_a_as_b.claim_attempt(theirs, epoch)
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="not one of node"):
        await node_a.record_dead_letter(f"agent-{NODE_B}", _Delivery("corral.task.assigned.x"), "forged")
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="not node node-a's agent"):
        await node_a.beat(f"agent-{NODE_B}@host:1:abc")
    states = await db.fetch("SELECT state FROM launcher.attempts ORDER BY state")
    assert [row["state"] for row in states] == ["ASSIGNED", "RUNNING"]  # untouched


async def test_a_wrong_revoked_or_missing_secret_is_refused(db: Database, agent_db: Database) -> None:
    secret = await mint_node_credential(db, NODE_A)
    assert await NodeRepository(agent_db, NODE_A, secret).live_attempts() == []
    for wrong in ("", secret[:-1] + "x", None):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not node {NODE_A}"):
            await NodeRepository(agent_db, NODE_A, wrong).register(30.0, "sandbox", "", 4)
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not node {NODE_B}"):
        await NodeRepository(agent_db, NODE_B, secret).live_attempts()  # no credential at all
    await revoke_node_credential(db, NODE_A)
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not node {NODE_A}"):
        await NodeRepository(agent_db, NODE_A, secret).live_attempts()
    renewed = await mint_node_credential(db, NODE_A)
    assert await NodeRepository(agent_db, NODE_A, renewed).live_attempts() == []
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await NodeRepository(agent_db, NODE_A, secret).live_attempts()  # the old one stays dead


def test_a_nodes_events_go_to_the_partitions_the_launchers_relay_publishes() -> None:
    """``launcher.check_node_event`` (migration 0025) accepts a node's rows in partitions
    32-47 only: the launcher's block (shared/outbox/rows.PUBLISHERS), whose relay
    publishes them. Should the blocks move, so must that check (a new migration)."""
    accepted = set(range(32, 48))
    assert set(partitions_of((AGENT,))) == accepted
    assert accepted <= set(partitions_of(sources_published_with("corral/launcher")))


async def test_a_node_may_write_only_true_events_about_its_own_attempt(
    db: Database, agent_db: Database
) -> None:
    """The rows it hands over are checked: no event about another attempt or node, of
    another type, or in a partition another service's relay reads."""
    await attempts.known_nodes(db, NODE_A)
    mine, other = await attempts.assigned(db, NODE_A, instances=2, state="STARTING")
    job_id = await _job_of(db, mine)
    secret = await mint_node_credential(db, NODE_A)
    node = NodeRepository(agent_db, NODE_A, secret)

    def events(attempt_id: str = mine, node_id: str = NODE_A) -> tuple[TaskStarted, JobRunning]:
        return started_events(
            AGENT, attempt_id=attempt_id, job_id=job_id, generation=1, node_id=node_id, pid=7
        )

    about_other, _ = events(attempt_id=other)
    right_started, right_running = events()
    as_node_b, _ = events(node_id=NODE_B)
    foreign = right_started.model_copy(update={"source": "corral/api"})
    for started, running in (
        (about_other, right_running),
        (as_node_b, right_running),
        (foreign, right_running),
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="may not write this event"):
            await node.mark_running(mine, 7, None, None, started, running)
    elsewhere = list(outbox_row(right_started, job_id))
    elsewhere[3] = 0  # a partition of another service's relay
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="may not write this event"):
        await agent_db.fetchrow(
            NODE_SQL.mark_running,
            NODE_A,
            secret,
            mine,
            7,
            None,
            None,
            *elsewhere,
            *outbox_row(right_running, job_id),
        )
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="may not write this event"):
        # a task.started presented as the job's running
        await node.mark_running(mine, 7, None, None, right_started, right_started)  # type: ignore[arg-type]
    submitted = 1
    assert await db.fetchval("SELECT count(*) FROM corral.outbox WHERE aggregate = $1", job_id) == submitted
    assert await db.fetchval("SELECT state FROM launcher.attempts WHERE id = $1", mine) == "STARTING"
    assert await node.mark_running(mine, 7, None, None, right_started, right_running) is not None


async def test_a_node_tells_only_of_its_own_running_attempts_over_their_gpu_share(
    db: Database, agent_db: Database
) -> None:
    """``launcher.node_report_over_limit`` (migration 0037): its own attempt, RUNNING, and
    a true event about it; anything else is refused or writes nothing."""
    await attempts.known_nodes(db, NODE_A, NODE_B)
    [mine] = await attempts.assigned(db, NODE_A, instances=1, state="RUNNING")
    [theirs] = await attempts.assigned(db, NODE_B, instances=1, state="RUNNING")
    [starting] = await attempts.assigned(db, NODE_A, instances=1, state="STARTING")
    node = NodeRepository(agent_db, NODE_A, await mint_node_credential(db, NODE_A))

    async def over(attempt_id: str, **change: object) -> TaskOverLimit:
        facts = {"attempt_id": attempt_id, "job_id": await _job_of(db, attempt_id), "node_id": NODE_A}
        data = TaskOverLimitData.model_validate(
            {**facts, "gpu_index": 0, "used_mb": 50000, "limit_mb": 40779, "action": "killed", **change}
        )
        return TaskOverLimit(source=AGENT, subject=attempt_id, data=data)

    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"not one of node {NODE_A}'s"):
        await node.report_over_limit(await over(theirs))
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="may not write this event"):
        await node.report_over_limit(await over(mine, node_id=NODE_B))
    assert await node.report_over_limit(await over(starting)) is False  # not running: nothing
    assert await node.report_over_limit(await over(mine)) is True
    subjects = await db.fetch("SELECT subject FROM corral.outbox WHERE subject LIKE 'corral.task.%'")
    assert [row["subject"] for row in subjects] == [f"corral.task.over_limit.{NODE_A}"]
