"""The smallest HTTP client the commands need: where the API is, which token, and errors
shown the way the API explains them (RFC 9457 problem+json), never as a traceback."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx


class CommandError(Exception):
    """Printed as is; the command exits 1."""


def api_url() -> str:
    return os.environ.get("CORRAL_URL", f"http://127.0.0.1:{os.environ.get('CORRAL_PORT', '8080')}")


def token() -> str:
    if os.environ.get("CORRAL_TOKEN"):
        return os.environ["CORRAL_TOKEN"]
    path = Path(os.environ.get("CORRAL_HOME", ".corral")) / "admin-token"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        raise CommandError(
            f"no token: set CORRAL_TOKEN, or run where {path} exists (make up writes it)"
        ) from None


def request(method: str, path: str, **kwargs: Any) -> Any:
    url = api_url()
    try:
        response = httpx.request(
            method, url + path, headers={"Authorization": f"Bearer {token()}"}, timeout=10, **kwargs
        )
    except httpx.TransportError as exc:
        raise CommandError(f"cannot reach the Corral API at {url} ({exc}); is it running? (make up)") from exc
    if response.status_code >= 400:
        try:
            problem = response.json()
            message = problem.get("detail") or problem.get("title") or response.text
        except ValueError:
            message = response.text
        raise CommandError(f"{response.status_code}: {message}")
    return response.json() if response.content else None  # a 204 has no body
