"""Submit-time check of a job's storage: every config it names exists and the submitter
may use it (``shared/storage_spec.py``; configs are the storage slice's, read here with
the jobs slice's own query, so the slices stay apart).

An admin is told a name does not exist (422). A user gets one 403 for a config that does
not exist and for one none of their groups may use, as for virtual clusters: telling
them apart would tell them which storage other teams have. The check is read, not
locked: a config deleted after the submit fails the task's start on its node instead.
"""

from __future__ import annotations

from pathlib import Path

from shared.db.pool import Database
from shared.db.queries import Queries
from shared.errors import Forbidden, InvalidInput
from shared.jobs import JobSpec

SQL = Queries(Path(__file__).parent / "sql")


async def check_storage(db: Database, spec: JobSpec, vc_user: str | None) -> None:
    """Raise unless every config ``spec.storage`` names exists and ``vc_user`` (None: an
    admin) may use it."""
    if not spec.storage:
        return
    rows = await db.fetch(SQL.storage_access, [use.name for use in spec.storage], vc_user)
    refused = [str(r["name"]) for r in rows if not r["usable"]]
    if not refused:
        return
    names = ", ".join(repr(n) for n in refused)
    if vc_user is None:
        raise InvalidInput(
            f"storage: no storage config named {names}; GET /api/v1/storage lists them, and"
            " PUT /api/v1/storage/NAME defines one"
        )
    raise Forbidden(
        f"storage: you may not use {names}: no such storage config, or none of your groups may use it."
        " Drop it from the job's storage, or ask an admin to add one of your groups to the config"
    )
