"""What the node fetches into a task's working directory before its command runs
(``tasks[].fetch``): part of the job spec (``shared/jobs.py``).

A ``git`` source is cloned and checked out at ``version`` (a commit, tag or branch); an
``archive`` (``.tar.gz``, ``.tgz``, ``.tar``, ``.zip``) is unpacked; a ``file`` is
copied. The node fetches as the task's own identity, so a ``file://`` source is read
with the task's rights, never the agent's. A scheme the cluster cannot reach
(``hdfs://``, ``s3://`` without a client configured) is refused at submit, naming it.
OpenPAI's ``script`` and ``data`` prerequisites become fetches (``services/api/jobs/openpai.py``).
How a node fetches (``services/launcher/agent/fetching.py``; a pod's init container on
Kubernetes), its limits and how a failed fetch is classified: docs/fetch.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.job_io import check_relative_path

FETCH_SCHEMES = frozenset({"http", "https", "git", "file"})


def uri_scheme(uri: str) -> str:
    """The scheme of ``uri`` in lower case ('' for none)."""
    head, sep, _ = uri.partition("://")
    return head.lower() if sep else ""


class Fetch(BaseModel):
    """One source fetched into the task's working directory before it starts."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    uri: str = Field(
        max_length=2048,
        pattern=r"^[^\x00-\x20]+$",
        description="http(s)://, git:// or file:// URI (file: read with the task's own rights)",
    )
    kind: Literal["git", "archive", "file"] = Field(
        description="git: clone at version; archive: unpack (.tar.gz, .tgz, .tar, .zip); file: copy"
    )
    version: str | None = Field(
        default=None,
        max_length=255,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$",
        description="for git: the commit, tag or branch to check out (default: the default branch)",
    )
    path: str = Field(max_length=255, description="where it lands, relative to the working directory")

    @field_validator("uri")
    @classmethod
    def _reachable_scheme(cls, value: str) -> str:
        scheme = uri_scheme(value)
        if scheme not in FETCH_SCHEMES:
            raise ValueError(
                f"Corral cannot fetch {scheme + '://' if scheme else 'scheme-less'} URIs "
                f"(it fetches {', '.join(sorted(s + '://' for s in FETCH_SCHEMES))}); copy the data "
                "somewhere those reach, mount it as storage, or fetch it in the command"
            )
        return value

    @field_validator("path")
    @classmethod
    def _inside_working_dir(cls, value: str) -> str:
        return check_relative_path(value, "fetch path")

    @model_validator(mode="after")
    def _version_is_for_git(self) -> Fetch:
        if self.version is not None and self.kind != "git":
            raise ValueError(f"version is for a git fetch; a {self.kind} is fetched as it is at its URI")
        return self
