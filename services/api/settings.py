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
    # How long a request for a piece of a task's log waits for the node's answer before a
    # 503 (a node nobody answers for fails at once); a followed log waits this long for a
    # node that stopped answering before its stream ends saying so (logs.py).
    node_logs_timeout_s: float = Field(default=5.0, gt=0, le=60)
    # What a machine joining as a node is told (routes_node_join.py): where the bus is
    # (and the CA of its certificate), and the node agents' database login and password.
    # Unset: this API admits no nodes (make up sets them).
    join_nats_url: str = ""
    join_nats_ca_file: Path | None = None
    join_database_url: str = ""
    join_agent_password_file: Path | None = None
    # make up's supervisor's state (corral/local/supervisor_state.py), shown in the
    # services view; unset where nothing supervises the processes but Kubernetes.
    supervisor_state_file: Path | None = None
    # SSE (GET /api/v1/events): a comment this often on an idle stream, and how many
    # events one subscriber may have queued before it must catch up from JetStream.
    sse_keepalive_s: float = Field(default=15.0, gt=0, le=300)
    sse_queue_limit: int = Field(default=10_000, ge=10)
    # How often an open event stream checks that its token still holds: one revoked or
    # expired, or whose user was deleted or demoted, ends the stream (the client's
    # reconnect then gets the 401 or the narrower view).
    sse_reauth_s: float = Field(default=30.0, gt=0, le=3600)
    # The event hub reads the lifecycle streams only while someone follows them: it stops
    # once no stream has been open for this long (event_hub.py).
    sse_tail_idle_s: float = Field(default=60.0, gt=0)
    # Webhooks: the delays between attempts (Standard Webhooks' schedule: about a day in
    # all, then the delivery is failed), how long one attempt may take, how long a claimed
    # delivery is leased (a crash mid-send sends it again after this), how many are sent
    # at once, and how long a rotated secret keeps signing beside the new one.
    webhook_retry_delays_s: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 36000)
    webhook_timeout_s: float = Field(default=15.0, gt=0, le=120)
    webhook_lease_s: float = Field(default=120.0, gt=0)
    webhook_concurrency: int = Field(default=32, ge=1, le=1000)
    webhook_secret_overlap_s: float = Field(default=24 * 3600.0, ge=0)
    # How long an Idempotency-Key on submit is remembered (idempotency.py).
    idempotency_retention_s: float = Field(default=24 * 3600.0, ge=60, le=30 * 24 * 3600.0)
    # How long the audit log keeps a row (older ones are deleted once an hour; audit.py).
    audit_retention_days: float = Field(default=365.0, gt=0)
    # Per-token rate limits (rate_limit.py), token buckets in each API process: requests
    # per second sustained and the burst allowed above it; submits (POST /api/v1/jobs and
    # resubmits) also draw from a bucket of their own. 0 turns a limit off.
    rate_limit_per_s: float = Field(default=50.0, ge=0)
    rate_limit_burst: int = Field(default=200, ge=1)
    submit_rate_limit_per_s: float = Field(default=20.0, ge=0)
    submit_rate_limit_burst: int = Field(default=100, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)

    @property
    def admin_token_path(self) -> Path:
        return self.api.admin_token_file or self.common.paths.home / "admin-token"
