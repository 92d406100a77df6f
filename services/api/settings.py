"""API settings: ``CORRAL_API_*`` plus the common groups."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.settings import CommonSettings


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_API_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    # Where the bootstrap admin token is kept; default $CORRAL_HOME/admin-token.
    admin_token_file: Path | None = None
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    # How long a dry run waits for the scheduler's answer before a 503.
    dry_run_timeout_s: float = Field(default=5.0, gt=0, le=60)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)

    @property
    def admin_token_path(self) -> Path:
        return self.api.admin_token_file or self.common.paths.home / "admin-token"
