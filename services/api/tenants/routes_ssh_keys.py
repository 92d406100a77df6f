"""``/api/v1/users/me/ssh-keys``: the public ssh keys a user keeps in Corral, by name.

A job names them in ``ssh.user_keys`` (``shared/ssh_spec.py``): each task of the job then
lets them log in (``corral ssh JOB``), as OpenPAI's ``userssh`` of type ``system`` does.
Keys are read when each task starts, so a key replaced or deleted applies to the tasks
started after. Each user manages their own keys only: a key logs in to that user's jobs.
Only public keys are kept; the text is checked (``check_public_key``), and a wrong one is
a 422 that says what is wrong.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.api.audit import set_audit_target
from services.api.dependencies import Db
from services.api.tenants.auth import AuthenticatedPrincipal
from services.api.tenants.repository import SQL
from shared.errors import NotFound
from shared.ssh_spec import KEY_NAME_PATTERN, PUBLIC_KEY_RE, check_public_key

router = APIRouter(prefix="/api/v1/users/me/ssh-keys", tags=["users and groups"])
KeyName = Annotated[
    str, Path(pattern=KEY_NAME_PATTERN, description="the key's name (lower-case letters, digits, . _ -)")
]


class SshKeySpec(BaseModel):
    """What ``PUT /api/v1/users/me/ssh-keys/{name}`` takes."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... me@laptop"}]},
    )

    public_key: str = Field(
        max_length=16_600,
        description="one OpenSSH public key line (the contents of ~/.ssh/id_ed25519.pub)",
        # (stated for clients; ``check_public_key`` enforces it, with a message that says what is wrong)
        json_schema_extra={"pattern": PUBLIC_KEY_RE.pattern},
    )

    @field_validator("public_key")
    @classmethod
    def _one_public_key(cls, value: str) -> str:
        return check_public_key(value)


class SshKeyView(BaseModel):
    name: str
    public_key: str
    created_at: datetime
    updated_at: datetime


class SshKeyList(BaseModel):
    items: list[SshKeyView]


def _missing(name: str) -> NotFound:
    return NotFound(f"you keep no ssh key named {name!r}; GET /api/v1/users/me/ssh-keys lists yours")


@router.put(
    "/{name}",
    operation_id="putSshKey",
    response_model=SshKeyView,
    responses={
        201: {"description": "made", "model": SshKeyView},
        422: {"description": "not one OpenSSH public key line (the message says what is wrong)"},
    },
)
async def put_ssh_key(
    name: KeyName,
    spec: SshKeySpec,
    request: Request,
    response: Response,
    principal: AuthenticatedPrincipal,
    db: Db,
) -> SshKeyView:
    """Keep a public key under ``name`` (replacing the one kept there): 201 when made, 200
    when replaced. Jobs name it in ``ssh.user_keys``."""
    created = await db.fetchval(SQL.put_ssh_key, principal.username, name, spec.public_key)
    response.status_code = 201 if created else 200
    set_audit_target(request, name)
    return await _one(db, principal.username, name)


@router.get("", operation_id="listSshKeys", response_model=SshKeyList)
async def list_ssh_keys(principal: AuthenticatedPrincipal, db: Db) -> SshKeyList:
    """Your keys, by name."""
    rows = await db.fetch(SQL.ssh_keys, principal.username, None)
    return SshKeyList(items=[SshKeyView(**dict(r)) for r in rows])


@router.get("/{name}", operation_id="getSshKey", response_model=SshKeyView)
async def get_ssh_key(name: KeyName, principal: AuthenticatedPrincipal, db: Db) -> SshKeyView:
    """One of your keys."""
    return await _one(db, principal.username, name)


@router.delete("/{name}", status_code=204, operation_id="deleteSshKey")
async def delete_ssh_key(
    name: KeyName, request: Request, principal: AuthenticatedPrincipal, db: Db
) -> Response:
    """Forget a key: tasks that start from now on no longer let it log in (running ones
    keep it until they end). A job that names it still runs."""
    if await db.fetchval(SQL.delete_ssh_key, principal.username, name) is None:
        raise _missing(name)
    set_audit_target(request, name)
    return Response(status_code=204)


async def _one(db: Db, username: str, name: str) -> SshKeyView:
    rows = await db.fetch(SQL.ssh_keys, username, name)
    if not rows:
        raise _missing(name)
    return SshKeyView(**dict(rows[0]))
