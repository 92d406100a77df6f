"""What an ended task means for retrying: the exit-code table a job may extend, and its
retry budget. Part of the job spec (``shared/jobs.py``)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.request_types import Integer

Classification = Literal["transient", "permanent", "unknown"]


class ExitRule(BaseModel):
    """One row of an exit-code table: what an ended task means for retrying.

    A rule matches when every condition it states matches (exit codes, signals, a
    platform condition such as ``node_lost``, a regular expression over the tail of
    the task's log). ``transient`` failures are the platform's fault: always retried,
    not counted. ``permanent`` ones are the user's: never retried. ``unknown`` ones are
    retried up to the job's ``max_retries``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    exit_codes: list[Annotated[Integer, Field(ge=0, le=255)]] | None = Field(default=None, max_length=256)
    signals: list[Annotated[Integer, Field(ge=1, le=64)]] | None = Field(default=None, max_length=64)
    platform: str | None = Field(default=None, pattern=r"^[a-z_]{1,40}$")
    log_pattern: str | None = Field(default=None, max_length=256)
    classification: Classification
    reason: str = Field(default="", max_length=200)

    @field_validator("log_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"log_pattern is not a valid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _has_a_condition(self) -> ExitRule:
        if not (self.exit_codes or self.signals or self.platform or self.log_pattern):
            raise ValueError("a rule needs at least one of exit_codes, signals, platform, log_pattern")
        return self


class RetryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_retries: Integer = Field(default=0, ge=0, le=100, description="retries of `unknown` failures")
    backoff_s: float = Field(default=10.0, ge=0, le=3600, description="first retry delay; doubles")
    max_backoff_s: float = Field(default=600.0, ge=0, le=86_400)
    rules: list[ExitRule] = Field(
        default_factory=list, max_length=64, description="checked before Corral's table"
    )
