"""Alerter settings: ``CORRAL_ALERTER_*`` and the common groups."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.settings import CommonSettings


class AlerterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_ALERTER_", extra="ignore")

    # Receivers and the route tree (services/alerter/routing.py); re-read when it changes.
    routing_file: Path | None = None
    routing_check_s: float = Field(default=2.0, gt=0)
    # Severities, runbooks and condition thresholds (services/alerter/alert_rules.yaml is
    # the default); re-read with the routing file.
    rules_file: Path | None = None
    conditions_check_s: float = Field(default=15.0, gt=0)
    escalation_check_s: float = Field(default=5.0, gt=0)
    delivery_interval_s: float = Field(default=1.0, gt=0)
    # Per request: a receiver that hangs costs this much, and only its own notification.
    delivery_timeout_s: float = Field(default=5.0, gt=0)
    # A claimed notification not reported within this is sent again (alerter killed).
    delivery_lease_s: float = Field(default=30.0, gt=0)
    max_backoff_s: float = Field(default=300.0, gt=0)
    give_up_after_s: float = Field(default=86_400.0, gt=0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    alerter: AlerterSettings = Field(default_factory=AlerterSettings)
