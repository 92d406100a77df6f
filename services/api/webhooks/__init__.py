"""Webhooks: subscriptions to lifecycle events, the fan-in that queues a delivery per
matching webhook, and the loop that sends them, signed per Standard Webhooks."""
