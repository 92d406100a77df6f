"""Services: the SDK's calls, mixed into ``Client`` and ``AsyncClient``.

    with Client() as corral:
        corral.create_service(load_job_spec("serve.yaml"))     # kind: service
        corral.scale_service("mnist", 3)
        corral.update_service_model("mnist", "mnist@2")       # a rolling update
        print(corral.get_service("mnist").state)               # Ready, Progressing, Degraded...

Built here once, as ``operations.py`` builds the others, and run by the client's own
``_run``. Creating is not retried after a dropped connection (a second try would say the
name is taken); scaling, a new spec and deleting may be repeated and are.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from corral.sdk.errors import CorralError
from corral.sdk.models.serving import Service
from corral.sdk.operations import Call, _get, _items, _one, _seg

T = TypeVar("T")


def create_service(spec: Mapping[str, Any]) -> Call[Service]:
    return Call("POST", "/api/v1/services", _one(Service), body=dict(spec))


def list_services() -> Call[list[Service]]:
    return _get("/api/v1/services", _items(Service))


def get_service(name: str) -> Call[Service]:
    return _get(f"/api/v1/services/{_seg(name)}", _one(Service))


def get_service_spec(name: str) -> Call[dict[str, Any]]:
    return _get(f"/api/v1/services/{_seg(name)}/spec", lambda response: dict(response.json()))


def scale_service(name: str, replicas: int) -> Call[Service]:
    path = f"/api/v1/services/{_seg(name)}/scale"
    return Call("POST", path, _one(Service), body={"replicas": replicas}, idempotent=True)


def update_service(name: str, spec: Mapping[str, Any]) -> Call[Service]:
    path = f"/api/v1/services/{_seg(name)}/spec"
    return Call("PUT", path, _one(Service), body=dict(spec), idempotent=True)


def delete_service(name: str) -> Call[Service]:
    return Call("DELETE", f"/api/v1/services/{_seg(name)}", _one(Service), idempotent=True)


def with_model(spec: Mapping[str, Any], ref: str) -> dict[str, Any]:
    """``spec`` with its input of model NAME pinned to ``ref`` (``NAME@VERSION``); raises
    ``CorralError`` when the spec has no input of that model."""
    name = ref.partition("@")[0]
    inputs = [dict(item) for item in spec.get("inputs") or []]
    found = [item for item in inputs if str(item.get("model", "")).partition("@")[0] == name]
    if not found:
        models = ", ".join(str(i["model"]) for i in inputs if i.get("model")) or "none"
        raise CorralError(
            f"the service reads no model {name!r} (its model inputs: {models}); edit its spec instead"
        )
    for item in found:
        item["model"] = ref
    return {**spec, "inputs": inputs}


class ServingCalls:
    """The services methods of ``Client``."""

    def _run(self, call: Call[T]) -> T:
        raise NotImplementedError  # the client's

    def create_service(self, spec: Mapping[str, Any]) -> Service:
        """Create a service from a ``kind: service`` spec; the controller starts its replicas."""
        return self._run(create_service(spec))

    def list_services(self) -> list[Service]:
        """Your services (every one, for admins), by name."""
        return self._run(list_services())

    def get_service(self, name: str) -> Service:
        return self._run(get_service(name))

    def get_service_spec(self, name: str) -> dict[str, Any]:
        """The service's current template."""
        return self._run(get_service_spec(name))

    def scale_service(self, name: str, replicas: int) -> Service:
        return self._run(scale_service(name, replicas))

    def update_service(self, name: str, spec: Mapping[str, Any]) -> Service:
        """A new template: the next revision, rolled out one replica at a time."""
        return self._run(update_service(name, spec))

    def update_service_model(self, name: str, ref: str) -> Service:
        """The current template with its model input of that name at ``ref`` (``mnist@2``)."""
        return self.update_service(name, with_model(self.get_service_spec(name), ref))

    def delete_service(self, name: str) -> Service:
        """Drain and stop every replica, then forget the service."""
        return self._run(delete_service(name))


class AsyncServingCalls:
    """The services methods of ``AsyncClient``."""

    async def _run(self, call: Call[T]) -> T:
        raise NotImplementedError  # the client's

    async def create_service(self, spec: Mapping[str, Any]) -> Service:
        return await self._run(create_service(spec))

    async def list_services(self) -> list[Service]:
        return await self._run(list_services())

    async def get_service(self, name: str) -> Service:
        return await self._run(get_service(name))

    async def get_service_spec(self, name: str) -> dict[str, Any]:
        return await self._run(get_service_spec(name))

    async def scale_service(self, name: str, replicas: int) -> Service:
        return await self._run(scale_service(name, replicas))

    async def update_service(self, name: str, spec: Mapping[str, Any]) -> Service:
        return await self._run(update_service(name, spec))

    async def update_service_model(self, name: str, ref: str) -> Service:
        return await self.update_service(name, with_model(await self.get_service_spec(name), ref))

    async def delete_service(self, name: str) -> Service:
        return await self._run(delete_service(name))
