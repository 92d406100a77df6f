"""API settings: ``CORRAL_API_*`` plus the common groups."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.settings import CommonSettings


class ApiSettings(BaseSettings):
    """The API: where it listens, its limits, its event stream and webhooks."""

    model_config = SettingsConfigDict(env_prefix="CORRAL_API_", extra="ignore", use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """The address the API listens on."""
    port: int = Field(default=8080, ge=0, le=65535)
    """The port the API listens on (its ``/healthz``, ``/readyz`` and ``/metrics`` too)."""
    reuse_port: bool = False
    """Bind the port with ``SO_REUSEPORT``, so several API processes of one machine share
    it and the kernel spreads new connections among them (``make up`` sets it with
    ``CORRAL_API_PROCESSES``). Each process keeps its own rate-limit buckets
    (services/api/rate_limit.py); idempotency keys are Postgres's, shared by all."""
    admin_token_file: Path | None = None
    """Where the bootstrap admin token is written at first start (mode 0600). Unset:
    ``$CORRAL_HOME/admin-token``."""
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    """The largest request body accepted; a larger one is refused with 413."""
    dry_run_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """How long a dry run waits for a scheduler's answer before answering 503."""
    node_logs_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """How long a request for a piece of a task's log waits for its node's answer
    (``corral.logs.<node>``) before a 503 (a node nobody answers for fails at once); a
    followed log waits this long for a node that stopped answering before its stream ends
    saying so (logs.py)."""
    join_nats_url: str = ""
    """The bus URL a machine joining as a node is told (``corral join``,
    routes_node_join.py). Unset (with the other ``CORRAL_API_JOIN_*``): this API admits no
    nodes; ``make up`` sets them all."""
    join_nats_ca_file: Path | None = None
    """The CA of the bus's certificate, handed to a joining node."""
    join_database_url: str = ""
    """The database URL a joining node's agent is told (the node agents' login)."""
    join_agent_password_file: Path | None = None
    """A file (0600) holding the node agents' database password, handed to a joining node."""
    supervisor_state_file: Path | None = None
    """The state ``make up``'s supervisor writes (corral/local/supervisor_state.py), shown in
    the services view. Unset where nothing but Kubernetes supervises the processes."""
    sse_keepalive_s: float = Field(default=15.0, gt=0, le=300)
    """A ``: keep-alive`` comment this often on an idle event stream (``GET
    /api/v1/events``), so proxies keep it open and a client can tell a dead connection."""
    sse_queue_limit: int = Field(default=10_000, ge=10)
    """Events one event-stream subscriber may have queued; one further behind catches up
    from JetStream instead, without a gap."""
    sse_reauth_s: float = Field(default=30.0, gt=0, le=3600)
    """How often an open event stream checks that its token still holds: one revoked or
    expired, or whose user was deleted or changed role, ends the stream (the client's
    reconnect then gets the 401 or the narrower view)."""
    sse_tail_idle_s: float = Field(default=60.0, gt=0)
    """The API process stops reading the lifecycle streams once no event stream has been
    open for this long (events/hub.py); the next one starts them again."""
    webhook_retry_delays_s: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 36000)
    """The delays between a webhook delivery's attempts, as a JSON list (Standard Webhooks'
    schedule: about a day in all); after the last, the delivery is failed."""
    webhook_timeout_s: float = Field(default=15.0, gt=0, le=120)
    """How long one webhook delivery attempt may take."""
    webhook_lease_s: float = Field(default=120.0, gt=0)
    """How long a claimed webhook delivery is leased: one whose sender crashed mid-send is
    sent again after this."""
    webhook_concurrency: int = Field(default=32, ge=1, le=1000)
    """Webhook deliveries each API process sends at once."""
    webhook_secret_overlap_s: float = Field(default=24 * 3600.0, ge=0)
    """How long a rotated webhook secret keeps signing beside the new one, unless the
    rotation asks for another overlap."""
    idempotency_retention_s: float = Field(default=24 * 3600.0, ge=60, le=30 * 24 * 3600.0)
    """How long an ``Idempotency-Key`` on submit is remembered (idempotency.py)."""
    audit_retention_days: float = Field(default=365.0, gt=0)
    """How long the audit log keeps a row; older ones are deleted once an hour (audit.py)."""
    rate_limit_per_s: float = Field(default=50.0, ge=0)
    """Requests per second each token may make, sustained (rate_limit.py: a token bucket in
    each API process). 0 turns the limit off."""
    rate_limit_burst: int = Field(default=200, ge=1)
    """Requests a token may make at once above the sustained rate."""
    submit_rate_limit_per_s: float = Field(default=20.0, ge=0)
    """Submits per second each token may make, sustained (``POST /api/v1/jobs`` and
    resubmits draw from this bucket as well as the general one). 0 turns it off."""
    submit_rate_limit_burst: int = Field(default=100, ge=1)
    """Submits a token may make at once above the sustained rate."""
    portal_session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    """How long a portal sign-in lasts (portal/session.py); the session also ends as soon
    as its token is revoked or expires."""
    portal_live_interval_s: float = Field(default=1.0, ge=0.1, le=60)
    """A live portal page is told of changes at most this often, however many events
    arrive (portal/live.py)."""
    portal_overview_interval_s: float = Field(default=5.0, ge=0.1, le=300)
    """Pages that aggregate the whole cluster (home, virtual clusters) are told of changes
    at most this often: on a busy cluster something changes every second."""
    portal_telemetry_refresh_s: float = Field(default=15.0, ge=1, le=3600)
    """Pages showing GPU telemetry (home, nodes) refresh this often while open, as
    utilisation is not a lifecycle event."""
    portal_idle_gpu_pct: float = Field(default=10.0, ge=0, le=100)
    """A running job whose GPUs averaged less than this utilisation is listed as idle on
    the portal's home page."""
    portal_idle_gpu_minutes: float = Field(default=30.0, gt=0)
    """How long a job's GPUs must have been held below ``portal_idle_gpu_pct`` before it
    is listed as idle."""
    interactive_idle_timeout_s: float = Field(default=1800.0, gt=0, le=7 * 24 * 3600.0)
    """An exec or port-forward session with no data either way for this long is ended by
    its node (interactive/); a proxied request, likewise."""
    interactive_open_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """How long opening a session waits for the node's answer before a 503."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)

    @property
    def admin_token_path(self) -> Path:
        return self.api.admin_token_file or self.common.paths.home / "admin-token"
