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
    model_config = SettingsConfigDict(env_prefix="CORRAL_DATABASE_", extra="ignore")

    url: str = "postgresql://corral@127.0.0.1:5433/corral"
    # A file holding the password of the URL's user (0600; read at each new connection,
    # so a rotated password is picked up): no password in the URL, the environment or
    # argv. ``make up`` writes one per service ($CORRAL_HOME/credentials/postgres-<name>).
    password_file: Path | None = None
    pool_min_size: int = Field(default=1, ge=0)
    pool_max_size: int = Field(default=8, ge=1)
    # Migrations are idempotent and serialised by an advisory lock, so every service may
    # run them at start; turn off where a deploy step owns schema changes.
    migrate_on_start: bool = True


class NatsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_NATS_", extra="ignore")

    url: str = "nats://127.0.0.1:4222"
    connect_timeout_s: float = Field(default=10.0, gt=0)
    # 1 on one machine; 3 on a clustered NATS (see deploy/).
    stream_replicas: int = Field(default=1, ge=1, le=5)
    # How long JetStream remembers a Nats-Msg-Id to drop duplicate publishes.
    duplicate_window_s: float = Field(default=120.0, gt=0)
    # This process's bus identity (shared/bus/identities.py): its user, and a file
    # holding its password (0600, read at each connection attempt, so a rotated password
    # is picked up). No user: connect without credentials (a server with auth refuses).
    user: str = ""
    password_file: Path | None = None
    # The CA that signed the server's certificate: TLS (also implied by a tls:// URL).
    ca_file: Path | None = None


class TelemetrySettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_TELEMETRY_", extra="ignore")

    # "none" keeps tracing in-process only (context still propagates through NATS);
    # "console" prints finished spans, for debugging one service by hand; "otlp" sends
    # them to the OTLP/HTTP endpoint the standard OTEL_EXPORTER_OTLP_* variables name.
    exporter: str = Field(default="none", pattern="^(none|console|otlp)$")
    log_level: str = "INFO"
    # "json" for a log pipeline (one object per line, with trace and job ids).
    log_format: str = Field(default="text", pattern="^(text|json)$")


class HealthSettings(BaseSettings):
    """Where a background service serves ``/healthz`` and ``/readyz``.

    Port 0 picks a free port (tests run many stacks side by side); ``None`` turns the
    endpoint off.
    """

    model_config = SettingsConfigDict(env_prefix="CORRAL_HEALTH_", extra="ignore")

    host: str = "127.0.0.1"
    port: int | None = Field(default=0, ge=0, le=65535)
    # How often the instance records that it is alive (shared/liveness.py).
    liveness_interval_s: float = Field(default=10.0, gt=0)


class HomeSettings(BaseSettings):
    """Where local state lives (logs, the admin token, private servers' data)."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_", extra="ignore")

    home: Path = Path(".corral")


class CommonSettings(BaseSettings):
    """The groups every service needs, read from the environment when built."""

    model_config = SettingsConfigDict(extra="ignore")

    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    nats: NatsSettings = Field(default_factory=NatsSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    paths: HomeSettings = Field(default_factory=HomeSettings)
