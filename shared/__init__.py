"""Corral's common library: settings, events, the NATS bus, Postgres access, the outbox,
telemetry, errors and the service runtime every service is built on.

`shared` never imports `services` or `corral` (an import-linter contract keeps it so).
"""
