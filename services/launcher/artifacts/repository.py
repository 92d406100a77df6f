"""The artifact server's and the success commit's SQL (``sql/artifacts.sql``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.artifacts.manifest import MANIFEST, ManifestEntry, to_json
from shared.db.pool import Connection, Database
from shared.db.queries import Queries

SQL = Queries(Path(__file__).parent / "sql")


@dataclass(frozen=True)
class AttemptRow:
    id: str
    job_id: str
    generation: int
    task_role: str
    task_index: int
    node_id: str
    state: str
    live: bool
    spec: dict[str, Any]


@dataclass(frozen=True)
class StoredInput:
    ref: str
    path: str
    manifest: list[ManifestEntry] | None  # None: its artifact is gone


@dataclass(frozen=True)
class SucceededTask:
    attempt_id: str
    task_role: str
    task_index: int
    reason: str
    manifest: list[ManifestEntry] | None  # None: nothing was saved


class ArtifactRecords:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def attempt(self, attempt_id: str) -> AttemptRow | None:
        row = await self._db.fetchrow(SQL.attempt, attempt_id)
        return None if row is None else AttemptRow(**dict(row))

    async def job_inputs(self, job_id: str) -> list[StoredInput]:
        rows = await self._db.fetch(SQL.job_inputs, job_id)
        return [
            StoredInput(
                ref=row["ref"],
                path=row["path"],
                manifest=None if row["manifest"] is None else MANIFEST.validate_python(row["manifest"]),
            )
            for row in rows
        ]

    async def checkpoint(self, attempt: AttemptRow) -> list[ManifestEntry] | None:
        manifest = await self._db.fetchval(
            SQL.checkpoint, attempt.job_id, attempt.task_role, attempt.task_index, attempt.id
        )
        return None if manifest is None else MANIFEST.validate_python(manifest)

    async def record_task_outputs(self, attempt: AttemptRow, manifest: list[ManifestEntry]) -> None:
        size = sum(entry.size for entry in manifest)
        await self._db.execute(
            SQL.record_task_outputs,
            attempt.id,
            attempt.job_id,
            attempt.task_role,
            attempt.task_index,
            to_json(manifest),
            size,
        )


async def succeeded_tasks(conn: Connection, job_id: str, generation: int) -> list[SucceededTask]:
    rows = await conn.fetch(SQL.succeeded_outputs, job_id, generation)
    return [
        SucceededTask(
            attempt_id=row["id"],
            task_role=row["task_role"],
            task_index=row["task_index"],
            reason=row["reason"],
            manifest=MANIFEST.validate_python(row["manifest"]) if row["saved"] else None,
        )
        for row in rows
    ]


async def insert_artifact(
    conn: Connection, artifact_id: str, job_id: str, output: str, manifest: list[ManifestEntry], sha256: str
) -> None:
    await conn.execute(
        SQL.insert_artifact,
        artifact_id,
        job_id,
        output,
        to_json(manifest),
        len(manifest),
        sum(entry.size for entry in manifest),
        sha256,
    )
