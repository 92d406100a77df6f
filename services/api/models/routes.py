"""``/api/v1/models``: list, read, register a version, a version's lineage; a job's
artifacts (``/api/v1/jobs/{id}/artifacts``) and one artifact's manifest
(``/api/v1/artifacts/{id}``).

Reads need the ``read`` scope, a register ``submit`` (the method decides:
``tenants/auth.py``). A model or artifact the caller may not read is "not found", as a
job is (``access.py``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from services.api.audit import set_audit_target
from services.api.models.access import may_read_job, reader_of
from services.api.models.dependencies import ModelsRepo
from services.api.models.models import (
    ArtifactList,
    ArtifactSummary,
    ArtifactView,
    ModelList,
    ModelSummary,
    ModelView,
    RegisterVersion,
    VersionDetail,
)
from services.api.models.registration import Registration, register_version
from services.api.models.repository import ModelRepository, ModelRow, Reader
from services.api.tenants.auth import AuthenticatedPrincipal
from shared.errors import NotFound
from shared.job_io import NAME_PATTERN

router = APIRouter(prefix="/api/v1", tags=["models"])

ModelName = Annotated[str, Path(pattern=NAME_PATTERN, description="the model's name")]
VersionPath = Annotated[
    str, Path(pattern=r"^([1-9][0-9]{0,8}|latest)$", description="a version number, or latest")
]
JOB_ID_PATTERN = r"^job-[0-9a-z]{26}$"
ARTIFACT_ID_PATTERN = r"^art-[0-9a-z]{26}$"


async def _visible_model(repo: ModelRepository, name: str, reader: Reader) -> ModelRow:
    model = await repo.get_model(name, reader)
    if model is None:
        raise NotFound(f"no model named {name!r} that you may read; GET /api/v1/models lists those you may")
    return model


@router.get("/models", operation_id="listModels", response_model=ModelList)
async def list_models(
    principal: AuthenticatedPrincipal,
    repo: ModelsRepo,
    cursor: Annotated[
        str | None, Query(pattern=NAME_PATTERN, description="next_cursor of the last page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> ModelList:
    """The models you may read (yours, your groups'; every model for admins), by name, a
    page at a time: ``next_cursor`` of one page, given as ``cursor``, yields the next."""
    rows = await repo.list_models(reader_of(principal), cursor, limit + 1)
    page = rows[:limit]
    more = len(rows) > limit
    return ModelList(items=[ModelSummary.of(r) for r in page], next_cursor=page[-1].name if more else None)


@router.get("/models/{name}", operation_id="getModel", response_model=ModelView)
async def get_model(name: ModelName, principal: AuthenticatedPrincipal, repo: ModelsRepo) -> ModelView:
    """One model with its versions, newest first: each one's artifact (sha256, files,
    bytes), the job and output it came from, its parent version."""
    model = await _visible_model(repo, name, reader_of(principal))
    return ModelView.with_versions(model, await repo.versions_of_model(name))


@router.post(
    "/models/{name}/versions",
    status_code=201,
    operation_id="registerModelVersion",
    response_model=VersionDetail,
    responses={
        403: {"description": "the model is one you may read but not extend (its owner's or an admin's)"},
        409: {"description": "the name is another user's model"},
        422: {
            "description": "the source job is not yours, did not succeed, has no such output or it is empty;"
            " a parent that is not a version; a group you are not in"
        },
    },
)
async def register(
    name: ModelName,
    body: RegisterVersion,
    request: Request,
    principal: AuthenticatedPrincipal,
    repo: ModelsRepo,
) -> VersionDetail:
    """Register an output of a succeeded job as the model's next version (1, 2, …). The
    first register makes the model, yours, shared with ``group`` if given. Jobs then name
    it as an input: ``{"model": "NAME@N"}`` or ``NAME@latest``."""
    wanted = Registration(name, body.source, body.parent, body.description, body.group)
    version = await register_version(repo, wanted, reader_of(principal))
    set_audit_target(request, f"{name}@{version.version}")
    return VersionDetail.with_lineage(version, await repo.inputs_of_job(version.source_job))


@router.get("/models/{name}/versions/{version}", operation_id="getModelVersion", response_model=VersionDetail)
async def get_version(
    name: ModelName, version: VersionPath, principal: AuthenticatedPrincipal, repo: ModelsRepo
) -> VersionDetail:
    """One version (or ``latest``) with its lineage: its artifact, the job and output it
    came from, what that job took as inputs (pinned), its parent version."""
    model = await _visible_model(repo, name, reader_of(principal))
    found = await repo.get_version(name, None if version == "latest" else int(version))
    if found is None:
        raise NotFound(f"model {name} has no version {version}; its newest is {model.latest_version}")
    return VersionDetail.with_lineage(found, await repo.inputs_of_job(found.source_job))


@router.get("/jobs/{job_id}/artifacts", operation_id="listJobArtifacts", response_model=ArtifactList)
async def list_job_artifacts(
    job_id: Annotated[str, Path(pattern=JOB_ID_PATTERN)], principal: AuthenticatedPrincipal, repo: ModelsRepo
) -> ArtifactList:
    """The outputs the job kept, one artifact each: files, bytes, sha256. A job keeps its
    outputs when it succeeds; until then (or if it did not) the list is empty."""
    job = await repo.job_brief(job_id)
    if job is None or not may_read_job(job, reader_of(principal)):
        raise NotFound(f"no job with id {job_id!r}; list your jobs with GET /api/v1/jobs")
    return ArtifactList(items=[ArtifactSummary.of(a) for a in await repo.artifacts_of_job(job_id)])


@router.get("/artifacts/{artifact_id}", operation_id="getArtifact", response_model=ArtifactView)
async def get_artifact(
    artifact_id: Annotated[str, Path(pattern=ARTIFACT_ID_PATTERN)],
    principal: AuthenticatedPrincipal,
    repo: ModelsRepo,
) -> ArtifactView:
    """One artifact with its manifest: every file's path, size and sha256. Readable by
    whoever may read its job, or a model with a version of it."""
    reader = reader_of(principal)
    artifact = await repo.get_artifact(artifact_id)
    if artifact is not None:
        job = await repo.job_brief(artifact.job_id)
        readable = job is not None and may_read_job(job, reader)
        if readable or await repo.artifact_readable_as_model(artifact_id, reader):
            return ArtifactView.with_manifest(artifact)
    raise NotFound(f"no artifact with id {artifact_id!r} that you may read")
