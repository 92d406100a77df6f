"""Fixtures of the launcher's tests: the FAKE Kubernetes API server (fake_kube_api.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from services.launcher.agent.sandbox.sandbox import Sandbox
from tests.launcher.fake_kube_api import FakeKubeApi
from tests.launcher.sandboxes import sandbox_for_tests


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeApi]:
    """The fake API server on a free loopback port, for this test alone."""
    fake = FakeKubeApi()
    await fake.start()
    yield fake
    await fake.close()


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """A sandbox as an agent opens one (root only: its tests are skipped otherwise)."""
    opened = sandbox_for_tests(tmp_path)
    yield opened
    opened.close()
