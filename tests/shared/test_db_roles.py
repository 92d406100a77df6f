"""Least privilege in Postgres: each service's role may do what its SQL does and nothing
more (a node agent's role, which may only call its node's functions for its own node:
``test_db_node_roles.py``).

Every test here tries to break a promise (a ``permission denied``) or shows that the role
does what its service needs. The table ``EXPECTED`` is the whole grant matrix, the node
agent's functions included: a table, view, sequence or function added without a decision
about who may use it fails ``test_every_object_has_a_grant_decision``.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import asyncpg
import pytest

from shared.bus.memory import MemoryBus
from shared.db.credentials import (
    SERVICE_ROLES,
    SecretFileProblem,
    read_secret_file,
    write_secret_file,
)
from shared.db.migrations import apply_migrations
from shared.db.pool import Database, connect
from shared.db.queries import Queries
from shared.deadletters import PostgresDeadLetters
from shared.liveness import Liveness
from shared.outbox import OutboxRelay, append
from shared.outbox.writing import change_with_event_statement
from shared.settings import DatabaseSettings
from tests.infra import PostgresServer, unique_name
from tests.shared.db_roles_support import GivenUpDelivery, login_as, url_as
from tests.shared.outbox_helpers import make_event

ROOT = Path(__file__).resolve().parents[2]
ROLES = tuple(SERVICE_ROLES.values())  # api, scheduler, launcher, monitor, alerter, agent

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
            url=url_as(database_url, user), password_file=password_file, pool_max_size=1
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
        await PostgresDeadLetters(as_service).record(
            service, GivenUpDelivery("corral.job.submitted.j"), "bad"
        )
        async with as_service.transaction() as conn:
            await append(conn, make_event("job-1"), aggregate="job-1")
        bus = MemoryBus()
        await bus.ensure_streams()
        assert await OutboxRelay(as_service, bus).relay_pending() == 1
        await OutboxRelay(as_service, bus)._delete_old_sent_rows()
    assert await db.fetchval("SELECT count(*) FROM corral.dead_letters") == 1
