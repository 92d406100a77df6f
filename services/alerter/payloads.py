"""What each kind of receiver is sent, in the formats their tools expect.

- ``webhook``: Alertmanager's webhook payload, version 4 (firing and resolved only, as
  Alertmanager sends), so tools written for Alertmanager work unchanged;
- ``pagerduty``: Events API v2 — ``trigger`` / ``acknowledge`` / ``resolve`` with the
  alert's fingerprint as ``dedup_key``, so PagerDuty folds them into one incident;
- ``slack``: an incoming-webhook message (``text``), any change;
- ``email``: a plain-text message over SMTP, any change.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.alerter.routing import Receiver

PAGERDUTY_ACTION = {"firing": "trigger", "acknowledged": "acknowledge", "resolved": "resolve"}
ZERO_TIME = "0001-01-01T00:00:00Z"


def _iso(value: datetime | None) -> str:
    return value.isoformat().replace("+00:00", "Z") if value else ZERO_TIME


def labels_of(alert: dict[str, Any]) -> dict[str, str]:
    """The alert's labels plus ``rule``, ``severity`` and ``alertname`` (what Alertmanager
    tools key on)."""
    return {
        **alert["labels"],
        "alertname": alert["rule"],
        "rule": alert["rule"],
        "severity": alert["severity"],
    }


def payload_for(receiver: Receiver, alert: dict[str, Any], event: str, by: str) -> dict[str, Any] | None:
    """The body to send, or None when this kind of receiver is not told of this change."""
    labels = labels_of(alert)
    if receiver.webhook is not None:
        if event == "acknowledged":
            return None
        status = "resolved" if event == "resolved" else "firing"
        return {
            "version": "4",
            "groupKey": f'{{}}:{{fingerprint="{alert["fingerprint"]}"}}',
            "truncatedAlerts": 0,
            "status": status,
            "receiver": receiver.name,
            "groupLabels": {"rule": alert["rule"]},
            "commonLabels": labels,
            "commonAnnotations": {"summary": alert["summary"], **alert["annotations"]},
            "externalURL": "",
            "alerts": [
                {
                    "status": status,
                    "labels": labels,
                    "annotations": {"summary": alert["summary"], **alert["annotations"]},
                    "startsAt": _iso(alert["started_at"]),
                    "endsAt": _iso(alert["resolved_at"] if status == "resolved" else None),
                    "generatorURL": "",
                    "fingerprint": alert["fingerprint"],
                }
            ],
        }
    if receiver.pagerduty is not None:
        body: dict[str, Any] = {
            "routing_key": receiver.pagerduty.routing_key,
            "event_action": PAGERDUTY_ACTION[event],
            "dedup_key": alert["fingerprint"],
        }
        if event == "firing":
            body["payload"] = {
                "summary": alert["summary"][:1024],
                "source": labels.get("node") or labels.get("job") or "corral",
                "severity": alert["severity"],
                "component": alert["rule"],
                "custom_details": {**labels, **alert["annotations"]},
            }
        return body
    verb = {"firing": "FIRING", "acknowledged": f"acknowledged by {by}", "resolved": f"resolved ({by})"}[
        event
    ]
    line = f"[{alert['severity'].upper()}] {alert['rule']}: {alert['summary']} — {verb}"
    if receiver.email is not None:
        details = "\n".join(f"  {k}: {v}" for k, v in sorted(labels.items()))
        return {
            "from": receiver.email.from_address,
            "to": receiver.email.to,
            "subject": line[:200],
            "body": f"{line}\n\nAlert {alert['id']} ({alert['fingerprint']}), firing since "
            f"{_iso(alert['started_at'])}.\n\nLabels:\n{details}\n",
        }
    return {"text": line}


def url_of(receiver: Receiver) -> str:
    if receiver.email is not None:
        scheme = "smtp+starttls" if receiver.email.starttls else "smtp"
        return f"{scheme}://{receiver.email.smtp_host}:{receiver.email.smtp_port}"
    target = receiver.webhook or receiver.slack or receiver.pagerduty
    assert target is not None  # one of them, by validation
    return str(target.url)
