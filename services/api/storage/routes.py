"""``/api/v1/storage`` (admins): storage configs, the named mounts jobs use.

A config is a kind (``hostpath``: a directory present on every node; ``nfs``: an export
each node mounts), a source, whether it is read-only, and who may use it: every user
(``all_users``), or the members of ``groups``; admins may use every config. A job names
configs in ``storage`` and each is mounted at ``/mnt/NAME`` in its tasks
(``shared/storage_spec.py``). A change applies to the tasks started after it: a node
reads the config when it starts a task. Deleting a group takes it off every config; a
config left with no group admits admins only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from services.api.storage.dependencies import StorageRepo
from services.api.storage.repository import NewStorage, StorageRow
from services.api.tenants.auth import AuthenticatedPrincipal, require_admin
from shared.errors import InvalidInput, NotFound
from shared.jobs import NAME_PATTERN
from shared.storage_spec import STORAGE_NAME_PATTERN, StorageKind, check_source

router = APIRouter(prefix="/api/v1/storage", tags=["storage"])
StorageName = Annotated[
    str, Path(pattern=STORAGE_NAME_PATTERN, description="a storage config's name, e.g. datasets")
]


class StorageSpec(BaseModel):
    """What ``PUT /api/v1/storage/{name}`` takes: the whole config (a put replaces it)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "kind": "nfs",
                    "source": "nfs1.example.com:/datasets",
                    "read_only": True,
                    "groups": ["vision"],
                },
                {"kind": "hostpath", "source": "/srv/corral-storage/scratch", "all_users": True},
            ]
        },
    )

    kind: StorageKind = Field(
        description="hostpath: a directory on every node; nfs: an export each node mounts"
    )
    source: str = Field(
        max_length=1024, description="hostpath: the directory's absolute path; nfs: SERVER:/EXPORT"
    )
    read_only: bool = Field(default=False, description="every job mounts it read-only")
    all_users: bool = Field(default=False, description="every user may use it (else: members of groups)")
    groups: list[Annotated[str, Field(pattern=NAME_PATTERN)]] = Field(
        default_factory=list,
        max_length=100,
        description="groups whose members may use it (admins always may)",
    )
    description: str = Field(default="", max_length=500, pattern=r"^[^\x00-\x1f\x7f]*$")

    @field_validator("groups")
    @classmethod
    def _unique_groups(cls, groups: list[str]) -> list[str]:
        return sorted(set(groups))

    @field_validator("source")
    @classmethod
    def _source_suits_kind(cls, source: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")  # (absent when kind itself is wrong: that is said)
        return source if kind is None else check_source(kind, source)


class StorageView(BaseModel):
    name: str
    kind: str
    source: str
    read_only: bool
    all_users: bool
    groups: list[str]
    description: str
    mount_path: str = Field(description="where a job's tasks see it")
    created_at: datetime
    created_by: str
    updated_at: datetime
    updated_by: str


class StorageList(BaseModel):
    items: list[StorageView]


def _view(row: StorageRow) -> StorageView:
    return StorageView(
        name=row.name,
        kind=row.kind,
        source=row.source,
        read_only=row.read_only,
        all_users=row.all_users,
        groups=row.groups,
        description=row.description,
        mount_path=f"/mnt/{row.name}",
        created_at=row.created_at,
        created_by=row.created_by,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
    )


def _no_storage(name: str) -> NotFound:
    return NotFound(f"no storage config {name!r}; list them with GET /api/v1/storage")


@router.get("", operation_id="listStorage", response_model=StorageList)
async def list_storage(principal: AuthenticatedPrincipal, repo: StorageRepo) -> StorageList:
    require_admin(principal, "list storage configs")
    return StorageList(items=[_view(r) for r in await repo.configs()])


@router.get("/{name}", operation_id="getStorage", response_model=StorageView)
async def get_storage(name: StorageName, principal: AuthenticatedPrincipal, repo: StorageRepo) -> StorageView:
    require_admin(principal, "read storage configs")
    rows = await repo.configs(name)
    if not rows:
        raise _no_storage(name)
    return _view(rows[0])


@router.put(
    "/{name}",
    operation_id="putStorage",
    response_model=StorageView,
    response_description="changed",
    responses={
        201: {"model": StorageView, "description": "created"},
        422: {
            "description": "a field is wrong (`errors` names it), `source` does not suit `kind` (a plain"
            " absolute path for hostpath, SERVER:/EXPORT for nfs), or `groups` names a group that does"
            " not exist"
        },
    },
)
async def put_storage(
    name: StorageName,
    spec: StorageSpec,
    response: Response,
    principal: AuthenticatedPrincipal,
    repo: StorageRepo,
) -> StorageView:
    """Create a storage config or replace it (admin): 201 when created, 200 when changed.
    Tasks already running keep what they mounted; those started later get the new one."""
    require_admin(principal, "define storage")
    config = NewStorage(
        name, spec.kind, spec.source, spec.read_only, spec.all_users, spec.description, spec.groups
    )
    written = await repo.put(config, principal.username)
    if written.missing_groups:
        raise InvalidInput(
            f"groups: no group named {', '.join(written.missing_groups)};"
            " create it first (POST /api/v1/groups)"
        )
    response.status_code = 201 if written.created else 200
    return _view((await repo.configs(name))[0])


@router.delete("/{name}", status_code=204, operation_id="deleteStorage")
async def delete_storage(name: StorageName, principal: AuthenticatedPrincipal, repo: StorageRepo) -> Response:
    """Delete a storage config (admin). Jobs that name it are refused at submit from now
    on, and their tasks that start later fail to start, saying so."""
    require_admin(principal, "delete storage configs")
    if not await repo.delete(name):
        raise _no_storage(name)
    return Response(status_code=204)
