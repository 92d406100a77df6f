"""Private NATS and Postgres servers and the process supervisor behind ``make up``.

Tests and benchmarks use the same pieces, so what they exercise is what ``make up`` runs.
"""
