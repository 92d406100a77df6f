"""Alerter settings: the common groups (receivers and rules arrive with their issue)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.settings import CommonSettings


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
