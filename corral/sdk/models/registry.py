"""Models, their versions and lineage, and the artifacts jobs keep."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from corral.sdk.models.base import Model


class ArtifactFile(Model):
    path: str
    size: int
    sha256: str


class Artifact(Model):
    """An output a succeeded job kept: ``JOB:OUTPUT``."""

    id: str
    job_id: str
    output: str
    files: int
    size_bytes: int
    sha256: str
    created_at: datetime


class ArtifactDetail(Artifact):
    manifest: list[ArtifactFile] = Field(default_factory=list)


class PinnedInput(Model):
    """An input of a job as it was pinned at submit (``mnist@latest`` → ``mnist@4``)."""

    position: int
    ref: str
    artifact_id: str
    path: str


class ModelVersion(Model):
    model: str
    version: int
    ref: str
    description: str = ""
    artifact_id: str
    sha256: str | None = None
    files: int | None = None
    size_bytes: int | None = None
    source_job: str
    source_output: str
    parent_version: int | None = None
    registered_by: str
    created_at: datetime


class ModelVersionDetail(ModelVersion):
    """A version read by itself (or just registered), with its lineage: what the source
    job took as inputs."""

    source_inputs: list[PinnedInput] = Field(default_factory=list)


class RegisteredModel(Model):
    name: str
    owner: str
    group: str | None = None
    description: str = ""
    latest_version: int
    created_at: datetime
    updated_at: datetime | None = None


class RegisteredModelDetail(RegisteredModel):
    """A model read by itself, with its versions."""

    versions: list[ModelVersion] = Field(default_factory=list)


class RegisteredModelPage(Model):
    items: list[RegisteredModel]
    next_cursor: str | None = None
