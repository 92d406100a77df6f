"""Settings groups shared by every service (pydantic-settings).

Each group reads its own ``CORRAL_<GROUP>_`` environment prefix, so ``CORRAL_DATABASE_URL``
and ``CORRAL_NATS_URL`` point a service at existing servers. Services add their own
groups in ``services/<name>/settings.py``. Nothing is read at import time: a service's
composition root builds its settings once and passes them down.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class DatabaseSettings(BaseSettings):
    """Postgres, the system of record: where it is and how each process connects."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_DATABASE_", extra="ignore", use_attribute_docstrings=True
    )

    url: str = "postgresql://corral@127.0.0.1:5433/corral"
    """The database (a libpq URL, without its password). ``make up`` starts a private
    cluster unless this is set, and then uses this server instead."""
    password_file: Path | None = None
    """A file (0600) holding the password of the URL's user, read at each new connection,
    so a rotated password is picked up: no password in the URL, the environment or argv.
    ``make up`` writes one per service (``$CORRAL_HOME/credentials/postgres-<name>``)."""
    pool_min_size: int = Field(default=1, ge=0)
    """Connections each process keeps open while idle."""
    pool_max_size: int = Field(default=8, ge=1)
    """Connections each process may hold at once."""
    migrate_on_start: bool = True
    """Apply pending migrations at start. They are idempotent and serialised by an
    advisory lock, so every service may run them; turn off where a deploy step owns schema
    changes (or where the service's role may not change the schema: ``make up`` migrates
    once itself)."""


class NatsSettings(BaseSettings):
    """NATS JetStream, the event bus: where it is and who this process is on it."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_NATS_", extra="ignore", use_attribute_docstrings=True
    )

    url: str = "nats://127.0.0.1:4222"
    """The NATS server (JetStream enabled). ``make up`` starts a private one unless this is
    set, and then uses this server instead."""
    connect_timeout_s: float = Field(default=10.0, gt=0)
    """How long one connection attempt may take."""
    stream_replicas: int = Field(default=1, ge=1, le=5)
    """JetStream replicas of Corral's streams: 1 on one machine, 3 on a clustered NATS
    (see deploy/)."""
    duplicate_window_s: float = Field(default=120.0, gt=0)
    """How long JetStream remembers a ``Nats-Msg-Id`` to drop a duplicate publish of the
    same event."""
    user: str = ""
    """This process's bus identity (shared/bus/identities.py). Empty: connect without
    credentials (a server with authorization refuses)."""
    password_file: Path | None = None
    """A file (0600) holding the bus identity's password, read at each connection attempt,
    so a rotated password is picked up."""
    ca_file: Path | None = None
    """The CA that signed the server's certificate: connect with TLS (a ``tls://`` URL
    implies TLS too)."""


class TelemetrySettings(BaseSettings):
    """Traces and logs."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_TELEMETRY_", extra="ignore", use_attribute_docstrings=True
    )

    exporter: str = Field(default="none", pattern="^(none|console|otlp)$")
    """Where finished trace spans go. ``none`` keeps tracing in-process (context still
    propagates through HTTP and NATS); ``console`` prints them, for debugging one service by
    hand; ``otlp`` sends them to the OTLP/HTTP endpoint the standard
    ``OTEL_EXPORTER_OTLP_*`` variables name."""
    log_level: str = "INFO"
    """The level of every logger of the process (``DEBUG``, ``INFO``, ``WARNING`` ...)."""
    log_format: str = Field(default="text", pattern="^(text|json)$")
    """``text`` for people; ``json`` for a log pipeline: one object per line with
    ``service``, ``trace_id``, ``span_id`` and ``job_id``."""


class HealthSettings(BaseSettings):
    """Where a background service serves ``/healthz`` and ``/readyz`` (and its Prometheus
    ``/metrics``). The API serves its own on its port (``CORRAL_API_PORT``)."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_HEALTH_", extra="ignore", use_attribute_docstrings=True
    )

    host: str = "127.0.0.1"
    """The address the health endpoint listens on."""
    port: int | None = Field(default=0, ge=0, le=65535)
    """Its port; 0 picks a free one (test stacks run side by side)."""
    liveness_interval_s: float = Field(default=10.0, gt=0)
    """How often the instance records that it is alive (``corral.service_instances``,
    shared/liveness.py): what ``corral instances`` and the ``service_down`` alert read."""


class HomeSettings(BaseSettings):
    """Where local state lives."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore", use_attribute_docstrings=True)

    home: Path = Path(".corral")
    """All local state: the private servers' data, logs, credentials, the admin token.
    Relative to the working directory."""


class CommonSettings(BaseSettings):
    """The groups every service needs, read from the environment when built."""

    model_config = SettingsConfigDict(extra="ignore")

    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    nats: NatsSettings = Field(default_factory=NatsSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    paths: HomeSettings = Field(default_factory=HomeSettings)
