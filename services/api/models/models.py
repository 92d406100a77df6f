"""The models slice's request and response models (what clients see, documented in OpenAPI)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from services.api.models.repository import ArtifactRow, InputRow, ModelRow, VersionRow
from shared.job_io import ARTIFACT_REF_PATTERN, NAME_PATTERN
from shared.request_types import Integer


class RegisterVersion(BaseModel):
    """``POST /api/v1/models/{name}/versions``: which output becomes the new version."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    source: str = Field(
        alias="from",
        pattern=ARTIFACT_REF_PATTERN,
        description="JOB:OUTPUT, an output of a succeeded job of yours, e.g. job-01j…:model",
    )
    parent: Annotated[Integer, Field(ge=1, le=999_999_999)] | None = Field(
        default=None,
        description="the version it was trained from; default: the one of this model the job took as input",
    )
    description: str = Field(
        default="", max_length=2000, pattern=r"^[^\x00]*$", description="the version's; a new model's too"
    )
    group: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="first register only: a group of yours whose members may read and use the model",
    )


class ArtifactSummary(BaseModel):
    id: str
    job_id: str
    output: str
    files: int
    size_bytes: int
    sha256: str = Field(description="sha256 of the canonical JSON of its manifest")
    created_at: datetime

    @classmethod
    def of(cls, row: ArtifactRow) -> ArtifactSummary:
        return cls(
            id=row.id,
            job_id=row.job_id,
            output=row.output,
            files=row.files,
            size_bytes=row.size_bytes,
            sha256=row.sha256,
            created_at=row.created_at,
        )


class ArtifactFile(BaseModel):
    path: str = Field(description="relative to the output's path")
    size: int
    sha256: str


class ArtifactView(ArtifactSummary):
    manifest: list[ArtifactFile] = Field(description="every file, sorted by path")

    @classmethod
    def with_manifest(cls, row: ArtifactRow) -> ArtifactView:
        files = [ArtifactFile.model_validate(entry) for entry in row.manifest or []]
        return cls(**ArtifactSummary.of(row).model_dump(), manifest=files)


class ArtifactList(BaseModel):
    items: list[ArtifactSummary]


class InputView(BaseModel):
    """An input as it was pinned when its job was submitted."""

    position: int
    ref: str = Field(description="pinned: mnist@3, or job-…:output")
    artifact_id: str
    path: str = Field(description="where it landed under $CORRAL_INPUT_DIR")

    @classmethod
    def of(cls, row: InputRow) -> InputView:
        return cls(position=row.position, ref=row.ref, artifact_id=row.artifact_id, path=row.path)


class VersionView(BaseModel):
    model: str
    version: int
    ref: str = Field(description="NAME@VERSION, as a job's input names it")
    description: str
    artifact_id: str
    sha256: str | None
    files: int | None
    size_bytes: int | None
    source_job: str
    source_output: str
    parent_version: int | None
    registered_by: str
    created_at: datetime

    @classmethod
    def of(cls, row: VersionRow) -> VersionView:
        return cls(
            model=row.model,
            version=row.version,
            ref=f"{row.model}@{row.version}",
            description=row.description,
            artifact_id=row.artifact_id,
            sha256=row.sha256,
            files=row.files,
            size_bytes=row.size_bytes,
            source_job=row.source_job,
            source_output=row.source_output,
            parent_version=row.parent_version,
            registered_by=row.registered_by,
            created_at=row.created_at,
        )


class VersionDetail(VersionView):
    """A version with its lineage: what the job that produced it took as inputs."""

    source_inputs: list[InputView]

    @classmethod
    def with_lineage(cls, row: VersionRow, inputs: list[InputRow]) -> VersionDetail:
        return cls(**VersionView.of(row).model_dump(), source_inputs=[InputView.of(i) for i in inputs])


class ModelSummary(BaseModel):
    name: str
    owner: str
    group: str | None = Field(description="whose members may read and use it too")
    description: str
    latest_version: int
    created_at: datetime
    updated_at: datetime | None = Field(description="when its newest version was registered")

    @classmethod
    def of(cls, row: ModelRow) -> ModelSummary:
        return cls(
            name=row.name,
            owner=row.owner,
            group=row.group_name,
            description=row.description,
            latest_version=row.latest_version,
            created_at=row.created_at,
            updated_at=row.latest_at,
        )


class ModelView(ModelSummary):
    versions: list[VersionView] = Field(description="newest first")

    @classmethod
    def with_versions(cls, row: ModelRow, versions: list[VersionRow]) -> ModelView:
        return cls(**ModelSummary.of(row).model_dump(), versions=[VersionView.of(v) for v in versions])


class ModelList(BaseModel):
    items: list[ModelSummary]
    next_cursor: str | None = Field(default=None, description="give as cursor for the next page; null: last")
