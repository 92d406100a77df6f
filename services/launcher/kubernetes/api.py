"""The few Kubernetes API calls the driver makes, over kubernetes-asyncio, on plain JSON.

Every call goes through ``CoreV1Api`` with ``_preload_content=False`` and decodes the
body itself: the driver works on the dicts the API server sent (the same shape the
manifests are written in and validated as), not on generated model classes, and a
watch is read line by line so its resourceVersion bookkeeping stays in the driver's
hands. Errors become ``KubeApiError`` (``NotFound``, ``AlreadyExists``, ``Gone``...),
with the API server's own message, raised ``from`` nothing the caller must know about.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, CoreV1Api

Object = dict[str, Any]


class KubeApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"Kubernetes API error {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFound(KubeApiError):
    pass


class AlreadyExists(KubeApiError):
    pass


class Gone(KubeApiError):
    """The resourceVersion a watch asked for is too old: list again."""


def _error(status: int, body: Object) -> KubeApiError:
    kind = {404: NotFound, 409: AlreadyExists, 410: Gone}.get(status, KubeApiError)
    return kind(status, str(body.get("reason", "")), str(body.get("message", body)))


def _decode(raw: bytes) -> Object:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {"message": raw.decode("utf-8", errors="replace")}
    return value if isinstance(value, dict) else {"message": str(value)}


async def _json(call: Any) -> Object:
    response: aiohttp.ClientResponse = await call
    try:
        body = _decode(await response.read())
    finally:
        response.release()
    if response.status >= 400:
        raise _error(response.status, body)
    return body


class KubeApi:
    """Pods, Services and Secrets of one namespace."""

    def __init__(self, api_client: ApiClient, namespace: str) -> None:
        # The generated stubs type bodies as models and results as loaded models; with
        # _preload_content=False both are plain JSON here, so the handle is untyped.
        self._core: Any = CoreV1Api(api_client)
        self._client: Any = api_client
        self.namespace = namespace

    async def create_pod(self, body: Object) -> Object:
        return await _json(self._core.create_namespaced_pod(self.namespace, body, _preload_content=False))

    async def read_pod(self, name: str) -> Object:
        return await _json(self._core.read_namespaced_pod(name, self.namespace, _preload_content=False))

    async def delete_pod(self, name: str, grace_s: int) -> Object:
        return await _json(
            self._core.delete_namespaced_pod(
                name, self.namespace, grace_period_seconds=grace_s, _preload_content=False
            )
        )

    async def list_pods(self, selector: str) -> tuple[list[Object], str]:
        """The pods and the list's resourceVersion, to watch from."""
        body = await _json(
            self._core.list_namespaced_pod(self.namespace, label_selector=selector, _preload_content=False)
        )
        return list(body.get("items") or []), str(body.get("metadata", {}).get("resourceVersion", ""))

    async def create_secret(self, body: Object) -> Object:
        return await _json(self._core.create_namespaced_secret(self.namespace, body, _preload_content=False))

    async def create_service(self, body: Object) -> Object:
        return await _json(self._core.create_namespaced_service(self.namespace, body, _preload_content=False))

    async def read_service(self, name: str) -> Object:
        return await _json(self._core.read_namespaced_service(name, self.namespace, _preload_content=False))

    async def delete_service(self, name: str) -> Object:
        # Background: the Service goes now, the garbage collector deletes its pods.
        return await _json(
            self._core.delete_namespaced_service(
                name, self.namespace, propagation_policy="Background", _preload_content=False
            )
        )

    async def list_services(self, selector: str) -> list[Object]:
        body = await _json(
            self._core.list_namespaced_service(
                self.namespace, label_selector=selector, _preload_content=False
            )
        )
        return list(body.get("items") or [])

    async def watch_pods(
        self, selector: str, resource_version: str, timeout_s: int
    ) -> AsyncGenerator[Object, None]:
        """Watch events (``{"type", "object"}``) after ``resource_version`` until the
        server ends the stream; raises ``Gone`` when that version is too old."""
        response: aiohttp.ClientResponse = await self._core.list_namespaced_pod(
            self.namespace,
            label_selector=selector,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_s,
            _preload_content=False,
        )
        try:
            if response.status >= 400:
                raise _error(response.status, _decode(await response.read()))
            while line := await response.content.readline():
                if not line.strip():
                    continue
                event = _decode(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise _error(int(status.get("code", 500)), status)
                yield event
        finally:
            response.close()  # mid-stream: drop the connection rather than drain it

    async def pod_log(self, name: str, follow: bool) -> AsyncGenerator[bytes, None]:
        """The pod's output; with ``follow``, until the container ends."""
        response: aiohttp.ClientResponse = await self._core.read_namespaced_pod_log(
            name, self.namespace, follow=follow, _preload_content=False
        )
        try:
            if response.status >= 400:
                raise _error(response.status, _decode(await response.read()))
            async for chunk in response.content.iter_any():
                yield chunk
        finally:
            response.close()

    async def follow_pod_log(
        self, name: str, since_time: str | None, idle_s: float, chunk_bytes: int = 64 * 1024
    ) -> AsyncGenerator[bytes, None]:
        """The pod's output, every line prefixed by the kubelet's RFC 3339 timestamp and a
        space, from ``since_time`` (whole seconds, as the API server forwards it) until
        the container ends; ``b""`` after each ``idle_s`` without output, so the reader
        can write out what it holds. Chunks of at most ``chunk_bytes``.

        The same GET as ``read_namespaced_pod_log(name, ns, follow=True,
        timestamps=True)``, made through ``ApiClient.call_api`` because the generated
        method has no ``sinceTime`` (the API's OpenAPI document leaves it out), and the
        relative ``sinceSeconds`` would depend on this machine's clock agreeing with the
        node's."""
        query: list[tuple[str, str]] = [("follow", "true"), ("timestamps", "true")]
        if since_time:
            query.append(("sinceTime", since_time))
        response: aiohttp.ClientResponse = await self._client.call_api(
            "/api/v1/namespaces/{namespace}/pods/{name}/log",
            "GET",
            path_params={"namespace": self.namespace, "name": name},
            query_params=query,
            header_params={"Accept": "text/plain"},
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        try:
            if response.status >= 400:
                raise _error(response.status, _decode(await response.read()))
            while True:
                try:
                    async with asyncio.timeout(idle_s):
                        # Cancelling a read that waits consumes nothing: no byte is lost.
                        chunk = await response.content.read(chunk_bytes)
                except TimeoutError:
                    yield b""
                    continue
                if not chunk:
                    return
                yield chunk
        finally:
            response.close()
