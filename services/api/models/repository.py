"""The models slice's SQL: models and their versions, the artifacts jobs left
(``launcher.artifacts``, the launcher's: read only here), and the inputs each job was
submitted with.

Nothing here decides: who may read or register what is ``access.py``, a register's checks
``registration.py``, an input's resolution ``inputs.py``. Reads that depend on who asks
take the ``Reader`` and filter in SQL, so a list never holds a model its reader may not
see. ``ModelWrites`` runs on one connection: the statements of a register or of a submit
that commit together.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from shared.db.pool import Database
from shared.db.queries import Queries

SQL = Queries(Path(__file__).parent / "sql")

# Versions listed with a model; older ones are read one by one.
MAX_LISTED_VERSIONS = 1000


class Executor(Protocol):
    """A pool or one connection: what the reads run on."""

    async def fetch(self, query: str, *args: Any) -> list[Any]: ...
    async def fetchrow(self, query: str, *args: Any) -> Any: ...
    async def fetchval(self, query: str, *args: Any) -> Any: ...
    async def execute(self, query: str, *args: Any) -> str: ...


@dataclass(frozen=True, slots=True)
class Reader:
    """Who reads: a user, and whether they act as an admin (who reads everything)."""

    username: str
    is_admin: bool


@dataclass(frozen=True, slots=True)
class ModelRow:
    name: str
    owner: str
    group_name: str | None
    description: str
    created_at: datetime
    latest_version: int  # 0: none yet (never, once committed: a model is made with its first version)
    latest_at: datetime | None


@dataclass(frozen=True, slots=True)
class VersionRow:
    model: str
    version: int
    artifact_id: str
    source_job: str
    source_output: str
    parent_version: int | None
    description: str
    registered_by: str
    created_at: datetime
    # The artifact's, None only if its row were missing.
    sha256: str | None
    files: int | None
    size_bytes: int | None


@dataclass(frozen=True, slots=True)
class LockedModel:
    name: str
    owner: str
    group_name: str | None


@dataclass(frozen=True, slots=True)
class JobBrief:
    id: str
    username: str
    state: str


@dataclass(frozen=True, slots=True)
class ArtifactRow:
    id: str
    job_id: str
    output: str
    files: int
    size_bytes: int
    sha256: str
    created_at: datetime
    manifest: list[dict[str, Any]] | None = None  # only when read by id


@dataclass(frozen=True, slots=True)
class InputRow:
    position: int
    ref: str
    artifact_id: str
    path: str


class ModelReads:
    """The reads, on a pool or on a transaction's connection."""

    def __init__(self, db: Executor) -> None:
        self.db = db

    async def list_models(self, reader: Reader, after: str | None, limit: int) -> list[ModelRow]:
        rows = await self.db.fetch(SQL.list_models, after, reader.username, reader.is_admin, limit)
        return [ModelRow(**row) for row in rows]

    async def get_model(self, name: str, reader: Reader) -> ModelRow | None:
        row = await self.db.fetchrow(SQL.get_model, name, reader.username, reader.is_admin)
        return ModelRow(**row) if row is not None else None

    async def versions_of_model(self, name: str, limit: int = MAX_LISTED_VERSIONS) -> list[VersionRow]:
        return [VersionRow(**row) for row in await self.db.fetch(SQL.versions_of_model, name, limit)]

    async def get_version(self, name: str, version: int | None) -> VersionRow | None:
        """Version ``version`` of the model, or its newest when None."""
        row = await self.db.fetchrow(SQL.get_version, name, version)
        return VersionRow(**row) if row is not None else None

    async def has_version(self, name: str, version: int) -> bool:
        return bool(await self.db.fetchval(SQL.has_version, name, version))

    async def job_brief(self, job_id: str) -> JobBrief | None:
        row = await self.db.fetchrow(SQL.job_brief, job_id)
        return JobBrief(**row) if row is not None else None

    async def artifacts_of_job(self, job_id: str) -> list[ArtifactRow]:
        return [ArtifactRow(**row) for row in await self.db.fetch(SQL.artifacts_of_job, job_id)]

    async def artifact_of_output(self, job_id: str, output: str) -> ArtifactRow | None:
        row = await self.db.fetchrow(SQL.artifact_of_output, job_id, output)
        return ArtifactRow(**row) if row is not None else None

    async def get_artifact(self, artifact_id: str) -> ArtifactRow | None:
        row = await self.db.fetchrow(SQL.get_artifact, artifact_id)
        return ArtifactRow(**row) if row is not None else None

    async def artifact_readable_as_model(self, artifact_id: str, reader: Reader) -> bool:
        return bool(
            await self.db.fetchval(
                SQL.artifact_readable_as_model, artifact_id, reader.username, reader.is_admin
            )
        )

    async def inputs_of_job(self, job_id: str) -> list[InputRow]:
        return [InputRow(**row) for row in await self.db.fetch(SQL.inputs_of_job, job_id)]

    async def parent_from_inputs(self, job_id: str, model: str) -> int | None:
        found = await self.db.fetchval(SQL.parent_from_inputs, job_id, model)
        return None if found is None else int(found)

    async def group_membership(self, group: str, username: str) -> bool | None:
        """None: no such group; else whether the user is a member."""
        found = await self.db.fetchval(SQL.group_membership, group, username)
        return None if found is None else bool(found)


class ModelWrites(ModelReads):
    """The statements of one transaction, on its connection."""

    async def lock_model(self, name: str) -> LockedModel | None:
        row = await self.db.fetchrow(SQL.lock_model, name)
        return LockedModel(**row) if row is not None else None

    async def insert_model(self, name: str, owner: str, group: str | None, description: str) -> None:
        """Nothing when the name exists (a concurrent first register won)."""
        await self.db.execute(SQL.insert_model, name, owner, group, description)

    async def insert_version(
        self,
        model: str,
        artifact_id: str,
        source_job: str,
        source_output: str,
        parent: int | None,
        description: str,
        registered_by: str,
    ) -> int:
        """The next version of the model (lock it first: ``lock_model``)."""
        version = await self.db.fetchval(
            SQL.insert_version,
            model,
            artifact_id,
            source_job,
            source_output,
            parent,
            description,
            registered_by,
        )
        return int(version)

    async def insert_job_inputs(self, job_id: str, inputs: Sequence[InputRow]) -> None:
        await self.db.execute(
            SQL.insert_job_inputs,
            job_id,
            [i.position for i in inputs],
            [i.ref for i in inputs],
            [i.artifact_id for i in inputs],
            [i.path for i in inputs],
        )


class ModelRepository(ModelReads):
    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.pool = db

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[ModelWrites]:
        async with self.pool.transaction() as conn:
            yield ModelWrites(conn)
