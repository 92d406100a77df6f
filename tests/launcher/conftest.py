"""Fixtures of the launcher's tests: the FAKE Kubernetes API server (fake_kube_api.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.launcher.fake_kube_api import FakeKubeApi


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeApi]:
    """The fake API server on a free loopback port, for this test alone."""
    fake = FakeKubeApi()
    await fake.start()
    yield fake
    await fake.close()
