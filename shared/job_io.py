"""What a job reads and leaves behind: its ``inputs`` (model versions and artifacts, placed
read-only under ``$CORRAL_INPUT_DIR`` before it starts) and its ``outputs`` (paths under
``$CORRAL_OUTPUT_DIR`` kept as artifacts when it succeeds). Part of the job spec
(``shared/jobs.py``)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Lower-case names: of jobs, roles, outputs, models.
NAME_PATTERN = r"^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$"
_RELATIVE_PATH_RE = re.compile(r"^[A-Za-z0-9._-][A-Za-z0-9._/-]{0,254}$")


def check_relative_path(value: str, what: str) -> str:
    """A plain relative path that stays inside its directory (no ``..``, not absolute)."""
    if not _RELATIVE_PATH_RE.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} must be a relative path of letters, digits, '.', '_', '-' and '/' "
            "(at most 255 characters)"
        )
    parts = [part for part in value.split("/") if part]
    if not parts or any(part in (".", "..") for part in parts):
        raise ValueError(f"{what} {value!r} escapes its directory; give a path below it without '..'")
    return "/".join(parts)


class JobOutput(BaseModel):
    """A directory (or file) the job leaves under ``$CORRAL_OUTPUT_DIR``, kept as an artifact.

    When the job succeeds, what every task left at ``path`` under its own output directory
    becomes one artifact, ``JOB:NAME``, with each file's size and sha256."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: Annotated[str, Field(pattern=NAME_PATTERN, description="the output's name, as in JOB:NAME")]
    path: str = Field(
        max_length=255, description="relative to $CORRAL_OUTPUT_DIR (no '..'); e.g. model or predictions"
    )

    @field_validator("path")
    @classmethod
    def _inside_output_dir(cls, value: str) -> str:
        return check_relative_path(value, "output path")


MODEL_REF_PATTERN = r"^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?@([1-9][0-9]{0,8}|latest)$"
ARTIFACT_REF_PATTERN = r"^job-[0-9a-z]{26}:[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$"


class JobInput(BaseModel):
    """A model version or an artifact, placed read-only under ``$CORRAL_INPUT_DIR`` before
    the job's tasks start, the same on every node.

    A model lands at ``models/NAME/VERSION`` (TensorFlow Serving's layout: point its
    ``model_base_path`` at ``models/NAME``), an artifact at ``artifacts/JOB/OUTPUT``,
    unless ``path`` says otherwise. ``NAME@latest`` is pinned at submit to the newest version."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    model: str | None = Field(
        default=None, pattern=MODEL_REF_PATTERN, description="NAME@VERSION, e.g. mnist@3"
    )
    artifact: str | None = Field(
        default=None, pattern=ARTIFACT_REF_PATTERN, description="JOB:OUTPUT, an output of a succeeded job"
    )
    path: str | None = Field(default=None, max_length=255, description="relative to $CORRAL_INPUT_DIR")

    @field_validator("path")
    @classmethod
    def _inside_input_dir(cls, value: str | None) -> str | None:
        return None if value is None else check_relative_path(value, "input path")

    @model_validator(mode="after")
    def _one_source(self) -> JobInput:
        if (self.model is None) == (self.artifact is None):
            raise ValueError("an input names exactly one of model (NAME@VERSION) or artifact (JOB:OUTPUT)")
        return self

    @property
    def default_path(self) -> str:
        """Where the input lands under ``$CORRAL_INPUT_DIR`` when ``path`` is not given."""
        if self.path is not None:
            return self.path
        if self.model is not None:
            name, version = self.model.split("@")
            return f"models/{name}/{version}"
        assert self.artifact is not None
        job, output = self.artifact.split(":")
        return f"artifacts/{job}/{output}"
