"""Webhook subscriptions and their delivery log."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from corral.sdk.models.base import Model


class Webhook(Model):
    id: str
    owner: str
    url: str
    event_types: list[str]
    virtual_cluster: str | None = None
    description: str = ""
    enabled: bool
    disabled_reason: str | None = None
    signing_secrets: int = 1
    created_at: datetime
    updated_at: datetime | None = None


class WebhookCreated(Webhook):
    secret: str = Field(description="the signing secret, shown this once: keep it")


class SecretRotated(Model):
    webhook_id: str
    secret: str
    previous_secrets_until: datetime


class DeliveryAttempt(Model):
    at: datetime
    status: int | None = None
    error: str | None = None
    duration_ms: int = 0


class Delivery(Model):
    id: int
    event_id: str
    event_type: str
    state: str = Field(description="pending, delivered or failed")
    attempts: int = 0
    next_attempt_at: datetime | None = None
    last_status: int | None = None
    last_error: str | None = None
    created_at: datetime
    finished_at: datetime | None = None
    log: list[DeliveryAttempt] = Field(default_factory=list)


class RedeliveryAccepted(Model):
    delivery_id: int
    detail: str
