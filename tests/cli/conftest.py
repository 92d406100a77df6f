"""The CLI against the real API on a real port (``tests/api/conftest.py``'s ``api``), and
against a whole stack of real processes for ``submit --wait`` (``tests/e2e``'s ``stack``)."""

from tests.api.conftest import Api, admin_token, api  # noqa: F401  # fixtures for this directory
from tests.e2e.conftest import stack  # noqa: F401

__all__ = ["Api"]
