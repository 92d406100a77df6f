"""What the API answers when Postgres cannot take a request: a 503 the client can retry.

Two kinds of "not now", told apart because they ask different things of whoever reads
the answer:

- Postgres is *away* (``DATABASE_AWAY``: down, restarting, in crash recovery, a
  connection cut): ``unavailable``, retry in a couple of seconds; it comes back by
  itself (``make up``'s supervisor or its platform restarts it).
- Postgres is up but *out of a resource* (``DATABASE_OUT_OF_RESOURCES``, SQLSTATE class
  53): its disk is full (``disk-full``), or it is out of memory or connection slots
  (``database-out-of-resources``). Retrying soon will not help until an operator frees
  the resource, so the detail says which one and ``Retry-After`` is longer.

Either way the failed statement's transaction was rolled back, so the answer says
nothing was changed: a submit's job, tasks, outbox row and idempotency key commit
together or not at all. A commit whose WAL write fails on a full disk makes Postgres
PANIC: that session sees the disk-full error or just its connection closed, every other
session ``CrashShutdownError`` (away), and the transaction, never flushed, is gone with
the crash rather than half-written.
"""

from __future__ import annotations

import logging

import asyncpg
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from services.api.problems import ProblemSlug, problem
from shared.db.pool import DATABASE_AWAY, DATABASE_OUT_OF_RESOURCES

log = logging.getLogger(__name__)

AWAY_RETRY_AFTER_S = 2
# An operator has to act before a retry can succeed; a client polling every 2 s only
# adds load (and, here, audit-log errors) to a database that cannot write.
OUT_OF_RESOURCES_RETRY_AFTER_S = 10

# SQLSTATE -> (problem slug, what is wrong and what to do). Postgres's own message is
# not repeated: for a full disk it names a data file, which is nobody's business here.
_OUT_OF: dict[str, tuple[ProblemSlug, str]] = {
    asyncpg.DiskFullError.sqlstate: (
        "disk-full",
        "the database's disk is full: free space where Postgres keeps its data, then retry",
    ),
    asyncpg.OutOfMemoryError.sqlstate: (
        "database-out-of-resources",
        "the database is out of memory: free memory on its machine or lower its load, then retry",
    ),
    asyncpg.TooManyConnectionsError.sqlstate: (
        "database-out-of-resources",
        "the database has no connection slot left: raise its max_connections or close idle "
        "clients, then retry",
    ),
}
_OUT_OF_OTHER: tuple[ProblemSlug, str] = (
    "database-out-of-resources",
    "the database is out of a resource it needs (SQLSTATE {sqlstate}; its log says which): "
    "free it, then retry",
)


def install_database_handlers(app: FastAPI) -> None:
    async def database_away(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable on %s %s: %r", request.method, request.url.path, exc)
        response = problem(
            503,
            "unavailable",
            "Service unavailable",
            "Corral's database is not reachable right now; nothing was changed. Retry shortly.",
            request.url.path,
        )
        response.headers["Retry-After"] = str(AWAY_RETRY_AFTER_S)
        return response

    async def database_out_of_resources(request: Request, exc: Exception) -> JSONResponse:
        sqlstate = getattr(exc, "sqlstate", None) or "53000"
        slug, detail = _OUT_OF.get(sqlstate, _OUT_OF_OTHER)
        log.error("database refused %s %s for want of resources: %r", request.method, request.url.path, exc)
        response = problem(
            503,
            slug,
            "Database out of resources",
            f"{detail.format(sqlstate=sqlstate)}; nothing was changed",
            request.url.path,
        )
        response.headers["Retry-After"] = str(OUT_OF_RESOURCES_RETRY_AFTER_S)
        return response

    for error in DATABASE_AWAY:
        app.add_exception_handler(error, database_away)
    for error in DATABASE_OUT_OF_RESOURCES:
        app.add_exception_handler(error, database_out_of_resources)
