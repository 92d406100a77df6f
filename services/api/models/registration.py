"""Registering a model version: an output of a succeeded job becomes ``NAME@N``.

What is checked, in order, each refusal saying which part is wrong and changing nothing:
the source job exists and the caller may read it, it SUCCEEDED, it kept that output, and
the output holds at least one file (422 each); the model, if it exists, is the caller's
(an admin's: anyone's) — a model the caller may read but not extend is a 403, a name
someone else holds and the caller may not see is a 409 (names are shared by everyone);
a group named on the first register exists and has the caller as a member (422); an
explicit ``parent`` is a version of the model (422).

Versions are numbered 1, 2, … per model with no gap: the register takes the model's row
``FOR UPDATE`` (made first if new: two first registers of one name race on the insert,
and the loser waits on the lock), so two registers at once get consecutive numbers and
neither fails. Without ``parent``, the version the source job took as an input of the
same model is its parent (a fine-tune of ``mnist@3`` is ``mnist@3``'s child).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.api.models.access import may_read_job, may_register
from services.api.models.inputs import version_list
from services.api.models.repository import (
    ArtifactRow,
    ModelReads,
    ModelRepository,
    ModelWrites,
    Reader,
    VersionRow,
)
from shared.errors import Conflict, Forbidden, InvalidInput


@dataclass(frozen=True, slots=True)
class Registration:
    model: str
    source: str  # JOB:OUTPUT
    parent: int | None = None
    description: str = ""
    group: str | None = None


async def register_version(repo: ModelRepository, wanted: Registration, reader: Reader) -> VersionRow:
    """The new version, committed; or a refusal that stored nothing."""
    job_id, output = wanted.source.split(":")
    artifact = await _registrable_output(repo, job_id, output, reader)
    async with repo.transaction() as tx:
        if wanted.group is not None:
            await _check_group(tx, wanted.group, reader)
        await tx.insert_model(wanted.model, reader.username, wanted.group, wanted.description)
        model = await tx.lock_model(wanted.model)
        assert model is not None  # inserted above, or by the register that beat this one; never removed
        if not may_register(model, reader):
            if await tx.get_model(wanted.model, reader) is None:
                raise Conflict(
                    f"the model name {wanted.model!r} is taken by another user; choose another name"
                )
            raise Forbidden(
                f"only the owner of model {wanted.model} ({model.owner}) or an admin may register"
                " versions of it; register yours under a name of your own"
            )
        if wanted.group is not None and model.group_name != wanted.group:
            shared = f"with group {model.group_name}" if model.group_name else "with no group"
            raise InvalidInput(
                f"group: model {wanted.model} is already shared {shared}; a group is named only on the"
                " first register of a model"
            )
        parent = await _parent(tx, wanted, job_id)
        version = await tx.insert_version(
            wanted.model, artifact.id, job_id, output, parent, wanted.description, reader.username
        )
        registered = await tx.get_version(wanted.model, version)
    assert registered is not None
    return registered


async def _registrable_output(reads: ModelReads, job_id: str, output: str, reader: Reader) -> ArtifactRow:
    job = await reads.job_brief(job_id)
    if job is None or not may_read_job(job, reader):
        raise InvalidInput(
            f"from: job {job_id} does not exist or is not yours; register an output of one of your"
            " jobs (GET /api/v1/jobs lists them)"
        )
    if job.state != "SUCCEEDED":
        raise InvalidInput(
            f"from: job {job_id} is {job.state}; only a succeeded job's outputs are kept, and can be"
            " registered"
        )
    artifact = await reads.artifact_of_output(job_id, output)
    if artifact is None:
        kept = ", ".join(a.output for a in await reads.artifacts_of_job(job_id)) or "none"
        raise InvalidInput(
            f"from: job {job_id} has no output {output!r}; its outputs: {kept}"
            f" (GET /api/v1/jobs/{job_id}/artifacts)"
        )
    if artifact.files < 1:
        raise InvalidInput(
            f"from: output {output!r} of job {job_id} is empty: its tasks left no file under its path;"
            " there is nothing to register"
        )
    return artifact


async def _check_group(tx: ModelWrites, group: str, reader: Reader) -> None:
    member = await tx.group_membership(group, reader.username)
    if member is None or not (member or reader.is_admin):
        raise InvalidInput(
            f"group: you are not a member of a group named {group!r}; name one of yours"
            " (GET /api/v1/whoami lists them), or none"
        )


async def _parent(tx: ModelWrites, wanted: Registration, job_id: str) -> int | None:
    if wanted.parent is None:
        return await tx.parent_from_inputs(job_id, wanted.model)
    if not await tx.has_version(wanted.model, wanted.parent):
        latest = await tx.get_version(wanted.model, None)
        existing = version_list(latest.version if latest else 0)
        raise InvalidInput(
            f"parent: model {wanted.model} has no version {wanted.parent}; versions: {existing}"
        )
    return wanted.parent
