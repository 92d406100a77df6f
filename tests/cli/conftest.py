"""The CLI against the real API on a real port (``tests/api/conftest.py``'s ``api``), and
against a whole stack of real processes for ``submit --wait`` (``tests/e2e``'s ``stack``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from corral import cli
from tests.api.conftest import Api, admin_token, api  # noqa: F401  # fixtures for this directory
from tests.e2e.conftest import stack  # noqa: F401

Corral = Callable[..., Coroutine[Any, Any, tuple[int, str, str]]]


@pytest.fixture
def corral(
    api: Api,  # noqa: F811  # the fixture imported above, as a parameter
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> Corral:
    """The ``corral`` command as alice (the API's user), run in a thread like a shell would."""
    monkeypatch.setenv("CORRAL_URL", api.url)
    monkeypatch.setenv("CORRAL_TOKEN", api.alice)
    monkeypatch.setenv("CORRAL_CONFIG", str(tmp_path / "config.toml"))

    async def run(*argv: str) -> tuple[int, str, str]:
        code = await asyncio.to_thread(cli.main, list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run
