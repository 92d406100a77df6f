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

from services.alerter.routing import Grouping, Receiver

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


def payload_for(
    receiver: Receiver,
    alert: dict[str, Any],
    event: str,
    by: str,
    group: Grouping,
    *,
    repeat: bool = False,
) -> dict[str, Any] | None:
    """The body to send for one alert's change (``repeat``: still firing, said again), or
    None when this kind of receiver is not told of this change. ``combine`` makes one
    message of a group's batch."""
    labels = labels_of(alert)
    if receiver.webhook is not None:
        if event == "acknowledged":
            return None
        status = "resolved" if event == "resolved" else "firing"
        return {
            "version": "4",
            "groupKey": group.key,
            "truncatedAlerts": 0,
            "status": status,
            "receiver": receiver.name,
            "groupLabels": group.labels,
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
    verb = {
        "firing": "STILL FIRING" if repeat else "FIRING",
        "acknowledged": f"acknowledged by {by}",
        "resolved": f"resolved ({by})",
    }[event]
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


def combine(kind: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """One message for a batch of one group's changes, as each kind of receiver reads it
    (PagerDuty is never batched: its Events API takes one event per request)."""
    if len(bodies) == 1:
        return bodies[0]
    if kind == "webhook":
        alerts = [a for body in bodies for a in body["alerts"]]
        return {
            **bodies[0],
            "status": "firing" if any(a["status"] == "firing" for a in alerts) else "resolved",
            "commonLabels": _common([a["labels"] for a in alerts]),
            "commonAnnotations": _common([a["annotations"] for a in alerts]),
            "alerts": alerts,
        }
    if kind == "email":
        return {
            **bodies[0],
            "subject": f"[{len(bodies)} alerts] {bodies[0]['subject']}"[:200],
            "body": "\n\n".join(body["body"] for body in bodies),
        }
    if kind == "slack":
        return {"text": f"{len(bodies)} alerts:\n" + "\n".join(body["text"] for body in bodies)}
    raise ValueError(f"{kind} notifications are sent one by one")


def _common(mappings: list[dict[str, str]]) -> dict[str, str]:
    first, *rest = mappings
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in rest)}


def url_of(receiver: Receiver) -> str:
    if receiver.email is not None:
        scheme = "smtp+starttls" if receiver.email.starttls else "smtp"
        return f"{scheme}://{receiver.email.smtp_host}:{receiver.email.smtp_port}"
    target = receiver.webhook or receiver.slack or receiver.pagerduty
    assert target is not None  # one of them, by validation
    return str(target.url)
