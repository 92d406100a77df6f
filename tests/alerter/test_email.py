"""E-mail over SMTP to a real SMTP server (aiosmtpd) on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from email import message_from_bytes
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller

from corral.local.ports import free_port
from services.alerter.alert_lifecycle import open_alert
from services.alerter.delivery import Deliverer
from services.alerter.routing import parse_routing
from services.alerter.rules import AlertDraft
from services.alerter.settings import AlerterSettings
from shared.db.pool import Database


class Mailbox:
    """An SMTP server's handler: keeps each message; ``answer`` refuses them instead."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.answer: str | None = None

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: ARG002  # aiosmtpd calls it so
        if self.answer is not None:
            return self.answer
        self.messages.append((envelope.rcpt_tos, message_from_bytes(envelope.content)))
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp() -> Iterator[tuple[Mailbox, int]]:
    mailbox, port = Mailbox(), free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield mailbox, port
    controller.stop()


def routing(port: int) -> str:
    return (
        "receivers:\n"
        "  - name: lead\n"
        f"    email: {{to: [lead@example.com, ops@example.com], from_address: corral@example.com,"
        f" smtp_host: 127.0.0.1, smtp_port: {port}}}\n"
        "route: {receiver: lead}\n"
    )


async def fire(db: Database, port: int) -> None:
    draft = AlertDraft(
        "GpuUnhealthy", "GpuUnhealthy/n7", "critical", "node n7 drained: Xid 79", {"node": "n7"}
    )
    async with db.transaction() as conn:
        await open_alert(conn, draft, parse_routing(routing(port)))


async def deliver(db: Database) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        await Deliverer(db, AlerterSettings(delivery_timeout_s=5.0, max_backoff_s=0.05), http).deliver_due()
    row = await db.fetchrow("SELECT state, attempts, last_status, last_error FROM alerter.notifications")
    assert row is not None
    return dict(row)


async def test_an_alert_is_mailed_to_every_address(db: Database, smtp: tuple[Mailbox, int]) -> None:
    mailbox, port = smtp
    await fire(db, port)
    assert (await deliver(db))["state"] == "sent"
    ((recipients, message),) = mailbox.messages
    assert recipients == ["lead@example.com", "ops@example.com"]
    assert message["From"] == "corral@example.com"
    assert message["Subject"].startswith("[CRITICAL] GpuUnhealthy: node n7 drained: Xid 79")
    body = message.get_payload()
    assert "node: n7" in body
    assert "GpuUnhealthy/n7" in body


async def test_smtp_refusals_4xx_retry_and_5xx_fail(db: Database, smtp: tuple[Mailbox, int]) -> None:
    mailbox, port = smtp
    await fire(db, port)
    mailbox.answer = "451 Try again later"
    first = await deliver(db)
    assert first["state"] == "pending"
    assert "451" in first["last_error"]
    mailbox.answer = "550 No such mailbox"
    await db.execute("UPDATE alerter.notifications SET next_attempt_at = now()")
    second = await deliver(db)
    assert second["state"] == "failed"
    assert second["attempts"] == 2
    assert "550" in second["last_error"]
