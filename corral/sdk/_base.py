"""What ``Client`` and ``AsyncClient`` share: where to connect, the headers, timeouts."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from corral.sdk.config import resolve
from corral.sdk.retries import RetryPolicy

USER_AGENT = "corral-sdk/0.1"
DEFAULT_TIMEOUT_S = 10.0
# An event stream carries a keep-alive every 15 s; four missed ones mean a dead connection.
EVENTS_READ_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Settings:
    url: str
    headers: dict[str, str]
    timeout: httpx.Timeout
    policy: RetryPolicy

    @classmethod
    def build(
        cls, url: str | None, token: str | None, timeout_s: float, retries: int | RetryPolicy
    ) -> Settings:
        connection = resolve(url, token)
        return cls(
            url=connection.url,
            headers={"Authorization": f"Bearer {connection.token}", "User-Agent": USER_AGENT},
            timeout=httpx.Timeout(timeout_s),
            policy=retries if isinstance(retries, RetryPolicy) else RetryPolicy(retries=retries),
        )

    def streaming(self, read_timeout_s: float | None) -> httpx.Timeout:
        """Connect as usual, then wait for the next bytes this long (``None``: forever)."""
        return httpx.Timeout(self.timeout.connect, read=read_timeout_s)
