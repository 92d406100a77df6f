"""The SDK against the real API on a real port (``tests/api/conftest.py``'s ``api``:
real Postgres, real NATS behind the event stream)."""

from tests.api.conftest import Api, admin_token, api  # noqa: F401  # fixtures for this directory

__all__ = ["Api"]
