"""``/api/v1/webhooks``: subscriptions to lifecycle events, signed per Standard Webhooks.

A webhook names event types (or prefixes such as ``corral.job.*``), optionally one VC,
and an http(s) URL. Its signing secret (``whsec_...``) is shown once, when it is created
or rotated; a rotation keeps the old secret signing beside the new one for
``overlap_s`` (default a day). A user's webhook gets the events of their own jobs (and
what every user may see); an admin's, every event — as on ``GET /api/v1/events``.
Someone else's webhook is "not found". How deliveries are made: ``delivery.py``.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Annotated, Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.api.dependencies import SettingsDep
from services.api.events.scope import check_type_patterns
from services.api.tenants.auth import AuthenticatedPrincipal, Principal
from services.api.webhooks.dependencies import DeliveryWake, WebhooksAdded, WebhooksRepo
from services.api.webhooks.repository import DeliveryRow, WebhookRepository, WebhookRow
from services.api.webhooks.signing import new_secret
from shared.clock import utcnow
from shared.errors import Conflict, InvalidInput, NotFound
from shared.ids import new_webhook_id
from shared.jobs import NAME_PATTERN

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])
WebhookId = Annotated[str, Path(pattern=r"^whk-[0-9a-z]{1,40}$", description="a webhook id, as listed")]
DeliveryState = Literal["pending", "delivered", "failed"]


class WebhookSpec(BaseModel):
    """What ``POST /api/v1/webhooks`` takes."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "url": "https://hooks.example.com/corral",
                    "event_types": ["corral.job.failed.v1", "corral.job.succeeded.v1"],
                    "virtual_cluster": "vision",
                    "description": "training results to the team's bot",
                }
            ]
        },
    )

    url: str = Field(min_length=1, max_length=2000, description="where deliveries are POSTed (http or https)")
    event_types: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        min_length=1, max_length=50, description="event types, or prefixes such as corral.job.*"
    )
    virtual_cluster: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="only events of this VC's jobs"
    )
    description: str = Field(default="", max_length=500, pattern=r"^[^\x00-\x1f\x7f]*$")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("a URL has no spaces or control characters")
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"not a valid URL ({exc})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "give an http:// or https:// URL with a host, e.g. https://hooks.example.com/corral"
            )
        if port == 0:
            raise ValueError("port 0 is not a port one can send to")
        return value


class WebhookView(BaseModel):
    id: str
    owner: str
    url: str
    event_types: list[str]
    virtual_cluster: str | None
    description: str
    enabled: bool
    disabled_reason: str | None = Field(description="why it stopped, e.g. the endpoint answered 410 Gone")
    signing_secrets: int = Field(description="secrets signing now: 2 during a rotation")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: WebhookRow) -> WebhookView:
        return cls(
            id=row.id,
            owner=row.username,
            url=row.url,
            event_types=row.event_types,
            virtual_cluster=row.virtual_cluster,
            description=row.description,
            enabled=row.enabled,
            disabled_reason=row.disabled_reason,
            signing_secrets=row.signing_secrets,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


class WebhookCreated(WebhookView):
    secret: str = Field(description="the signing secret, shown this once: keep it")


class WebhookList(BaseModel):
    items: list[WebhookView]


class RotateSecret(BaseModel):
    # Strict: a JSON body's types are the schema's (shared/request_types.py).
    model_config = ConfigDict(extra="forbid", strict=True)

    overlap_s: float | None = Field(
        default=None,
        ge=0,
        le=7 * 24 * 3600,
        description="how long the old secret keeps signing (default a day)",
    )


class SecretRotated(BaseModel):
    webhook_id: str
    secret: str = Field(description="the new signing secret, shown this once")
    previous_secrets_until: datetime = Field(description="the old secret signs beside it until then")


class DeliveryAttemptView(BaseModel):
    at: datetime
    status: int | None = Field(description="the endpoint's HTTP status; null when it did not answer")
    error: str | None
    duration_ms: int


class DeliveryView(BaseModel):
    id: int
    event_id: str = Field(description="also the webhook-id header")
    event_type: str
    state: DeliveryState
    attempts: int = Field(description="tries since it was (re)queued")
    next_attempt_at: datetime | None = Field(description="when it is tried next (pending only)")
    last_status: int | None
    last_error: str | None
    created_at: datetime
    queued_at: datetime
    finished_at: datetime | None
    log: list[DeliveryAttemptView] = Field(description="every attempt, oldest first")

    @classmethod
    def from_row(cls, row: DeliveryRow) -> DeliveryView:
        # A claim leases the row by moving next_attempt_at: once the delivery has ended, the
        # time left behind is no attempt to come.
        pending = row.state == "pending"
        return cls.model_validate(
            {**asdict(row), "next_attempt_at": row.next_attempt_at if pending else None}
        )


class DeliveryList(BaseModel):
    items: list[DeliveryView]


class RedeliveryAccepted(BaseModel):
    delivery_id: int
    detail: str


def _owner(principal: Principal) -> str | None:
    """Admins see every webhook; a user, their own."""
    return None if principal.is_admin else principal.username


def _not_found(webhook_id: str) -> NotFound:
    """Someone else's webhook too: its existence does not leak."""
    return NotFound(f"no webhook with id {webhook_id!r}; list yours with GET /api/v1/webhooks")


async def _visible(repo: WebhookRepository, webhook_id: str, principal: Principal) -> WebhookRow:
    rows = await repo.find(_owner(principal), webhook_id)
    if not rows:
        raise _not_found(webhook_id)
    return rows[0]


@router.post(
    "",
    status_code=201,
    operation_id="createWebhook",
    response_model=WebhookCreated,
    responses={
        422: {
            "description": "a field is wrong (`errors` names it), an event type is unknown, or the "
            "virtual cluster does not exist (or is not one you may use)"
        }
    },
)
async def create_webhook(
    spec: WebhookSpec, principal: AuthenticatedPrincipal, repo: WebhooksRepo, added: WebhooksAdded
) -> WebhookCreated:
    """Subscribe a URL to events; the answer holds the signing secret, shown only now.

    A virtual cluster that does not exist, or that you may not use, is refused alike (422):
    which VCs other teams have is not for you to learn."""
    types = check_type_patterns([t.strip() for t in spec.event_types], principal.is_admin)
    secret = new_secret()
    row = await repo.create(
        new_webhook_id(),
        principal.username,
        principal.is_admin,
        spec.url,
        types,
        spec.virtual_cluster,
        spec.description,
        secret,
    )
    if row is None:
        # A VC the owner may not use is reported as not existing, as it is everywhere else.
        raise InvalidInput(
            f"virtual cluster {spec.virtual_cluster!r} does not exist; GET /api/v1/virtual-clusters"
            " lists them"
        )
    added.set()  # the fan-in stops assuming there is none
    return WebhookCreated(**WebhookView.from_row(row).model_dump(), secret=secret)


@router.get("", operation_id="listWebhooks", response_model=WebhookList)
async def list_webhooks(principal: AuthenticatedPrincipal, repo: WebhooksRepo) -> WebhookList:
    """Newest first (yours; every webhook for admins). Secrets are never shown again."""
    rows = await repo.find(_owner(principal))
    return WebhookList(items=[WebhookView.from_row(r) for r in rows])


@router.get("/{webhook_id}", operation_id="getWebhook", response_model=WebhookView)
async def get_webhook(
    webhook_id: WebhookId, principal: AuthenticatedPrincipal, repo: WebhooksRepo
) -> WebhookView:
    return WebhookView.from_row(await _visible(repo, webhook_id, principal))


@router.delete("/{webhook_id}", status_code=204, operation_id="deleteWebhook")
async def delete_webhook(
    webhook_id: WebhookId, principal: AuthenticatedPrincipal, repo: WebhooksRepo
) -> Response:
    """Delete a webhook with its delivery log; nothing more is sent to it."""
    if not await repo.delete(webhook_id, _owner(principal)):
        raise _not_found(webhook_id)
    return Response(status_code=204)


@router.post("/{webhook_id}/rotate-secret", operation_id="rotateWebhookSecret", response_model=SecretRotated)
async def rotate_secret(
    webhook_id: WebhookId,
    principal: AuthenticatedPrincipal,
    repo: WebhooksRepo,
    settings: SettingsDep,
    body: RotateSecret | None = None,
) -> SecretRotated:
    """A new signing secret; the old one keeps signing beside it for ``overlap_s``, so
    deliveries carry both signatures while the receiver switches."""
    overlap_s = body.overlap_s if body and body.overlap_s is not None else None
    if overlap_s is None:
        overlap_s = settings.webhook_secret_overlap_s
    secret = new_secret()
    until = utcnow() + timedelta(seconds=overlap_s)
    if not await repo.rotate_secret(webhook_id, _owner(principal), secret, until):
        raise _not_found(webhook_id)
    return SecretRotated(webhook_id=webhook_id, secret=secret, previous_secrets_until=until)


@router.get("/{webhook_id}/deliveries", operation_id="listWebhookDeliveries", response_model=DeliveryList)
async def list_deliveries(
    webhook_id: WebhookId,
    principal: AuthenticatedPrincipal,
    repo: WebhooksRepo,
    state: DeliveryState | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> DeliveryList:
    """The delivery log, newest first: each event sent, its state, and every attempt with
    the endpoint's response code."""
    await _visible(repo, webhook_id, principal)
    rows = await repo.deliveries(webhook_id, state, limit)
    return DeliveryList(items=[DeliveryView.from_row(r) for r in rows])


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    operation_id="redeliverWebhook",
    response_model=RedeliveryAccepted,
    responses={409: {"description": "the webhook is disabled (its endpoint answered 410 Gone)"}},
)
async def redeliver(
    webhook_id: WebhookId,
    delivery_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    principal: AuthenticatedPrincipal,
    repo: WebhooksRepo,
    wake: DeliveryWake,
) -> RedeliveryAccepted:
    """Send a delivery again now (same ``webhook-id``, fresh timestamp and signature),
    with a fresh retry schedule. A disabled webhook sends nothing more (409)."""
    found = await repo.redeliver(webhook_id, _owner(principal), delivery_id)
    if found == "no-webhook":
        raise _not_found(webhook_id)
    if found == "disabled":
        raise Conflict(
            f"webhook {webhook_id} is disabled (its endpoint answered 410 Gone); create a new one"
            " for a live endpoint"
        )
    if found == "no-delivery":
        raise NotFound(
            f"webhook {webhook_id} has no delivery {delivery_id}; list them with"
            f" GET /api/v1/webhooks/{webhook_id}/deliveries"
        )
    wake.set()
    return RedeliveryAccepted(delivery_id=delivery_id, detail="queued; it is sent within moments")
