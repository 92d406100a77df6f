"""The alerter's Prometheus metrics (served on its health port with the shared ones)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

DELIVERIES = Counter(
    "corral_alert_deliveries",
    "Notification sends (one per batch of alerts sent together), by receiver kind and "
    "outcome: sent, retrying (will be tried again) or failed (given up).",
    ["kind", "outcome"],
)
DELIVERY_DURATION = Histogram(
    "corral_alert_delivery_duration_seconds",
    "Time one notification send took, answer or error included.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
