"""Alerter settings: ``CORRAL_ALERTER_*`` and the common groups."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.settings import CommonSettings


class AlerterSettings(BaseSettings):
    """The alerter: its rules and routing files, its loops, and how notifications are sent."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_ALERTER_", extra="ignore", use_attribute_docstrings=True
    )

    routing_file: Path | None = None
    """Receivers and the route tree (services/alerter/routing.py), re-read when it changes.
    Unset: no receivers (alerts are recorded, nobody is notified)."""
    routing_check_s: float = Field(default=2.0, gt=0)
    """How often the routing and rules files are checked for changes."""
    rules_file: Path | None = None
    """Severities, runbooks and condition thresholds, re-read with the routing file. Unset:
    the shipped services/alerter/alert_rules.yaml."""
    runbook_base_url: str = Field(default="http://127.0.0.1:8080/docs/runbooks/", max_length=400)
    """Where a rule's runbook given as a page name (``job-failed``) is found: the link is
    this, a ``/`` and the name. The default is the shipped pages (docs/runbooks/) as the
    API serves them on its default address (``make up`` sets its own); point it at your
    API's address as people reach it, or at a site of your own that hosts the pages. A
    runbook given as an absolute URL is used as it is."""
    conditions_check_s: float = Field(default=15.0, gt=0)
    """How often the condition rules (job pending too long, GPU idle, VC starved, service
    down) are checked against the cluster."""
    escalation_check_s: float = Field(default=5.0, gt=0)
    """How often unacknowledged alerts are checked for escalation and repeats."""
    delivery_interval_s: float = Field(default=1.0, gt=0)
    """Queued notifications are sent as soon as they are queued, and looked for at least
    this often (retries that came due)."""
    delivery_timeout_s: float = Field(default=5.0, gt=0)
    """How long one request to a receiver may take: a receiver that hangs costs this much,
    and only its own notification."""
    delivery_lease_s: float = Field(default=30.0, gt=0)
    """A claimed notification not reported within this is sent again (an alerter killed
    mid-delivery)."""
    max_backoff_s: float = Field(default=300.0, gt=0)
    """The longest wait between attempts to deliver a notification (1, 2, 4 ... s up to
    this)."""
    give_up_after_s: float = Field(default=86_400.0, gt=0)
    """How long a notification is retried before it is marked failed."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    alerter: AlerterSettings = Field(default_factory=AlerterSettings)
