"""The CLI against the real API on a real port (``api``, ``tests/fixtures/api.py``), and
against a whole stack of real processes for ``submit --wait`` (``stack``,
``tests/fixtures/stack.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from corral import cli
from tests.fixtures.api import Api

Corral = Callable[..., Coroutine[Any, Any, tuple[int, str, str]]]


@pytest.fixture
def corral(
    api: Api,
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
