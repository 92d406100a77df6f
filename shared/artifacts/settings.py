"""Where artifacts are kept and how much a task may leave: ``CORRAL_ARTIFACTS_*``.

Only the launcher reads the store settings (it alone touches the store); a node agent
reads ``max_task_output_mb``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ArtifactSettings(BaseSettings):
    """The artifact store (``shared/artifacts/store.py``) and the limit on a task's outputs."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_ARTIFACTS_", extra="ignore", use_attribute_docstrings=True
    )

    store: Literal["dir", "s3"] = "dir"
    """``dir``: blobs are files under ``dir`` (one machine, or a shared filesystem);
    ``s3``: objects in an S3 bucket (``s3_*``)."""
    dir: Path | None = None
    """The ``dir`` store's directory. Unset: ``$CORRAL_HOME/artifacts``."""
    staging_dir: Path | None = None
    """Where the launcher assembles uploads before they are verified and stored. Unset:
    ``<dir>/staging`` for the ``dir`` store (the same filesystem: a blob is renamed into
    place), ``$CORRAL_HOME/artifacts-staging`` for ``s3``."""
    s3_endpoint: str | None = None
    """The S3 API's URL (MinIO, Ceph, a test's moto server). Unset: AWS's own."""
    s3_bucket: str = "corral-artifacts"
    """The bucket blobs go in (it must exist)."""
    s3_region: str | None = None
    """The bucket's region. Unset: boto3's default (``AWS_REGION``, its config files)."""
    s3_access_key_id: str | None = None
    """With ``s3_secret_access_key_file``: the credentials. Unset: boto3's own chain
    (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, an instance role...)."""
    s3_secret_access_key_file: Path | None = None
    """A file (0600) holding the secret access key: never in the environment or argv."""
    max_task_output_mb: int = Field(default=10240, ge=0)
    """The most a task's output directory may hold when it ends (MiB); more is not
    uploaded, and the task's end says so (the job then fails at success for want of it)."""

    def directory(self, home: Path) -> Path:
        return (self.dir or home / "artifacts").resolve()

    def staging(self, home: Path) -> Path:
        if self.staging_dir is not None:
            return self.staging_dir.resolve()
        if self.store == "dir":
            return self.directory(home) / "staging"
        return (home / "artifacts-staging").resolve()
