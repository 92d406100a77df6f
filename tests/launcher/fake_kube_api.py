"""A FAKE Kubernetes API server, in process, for the Kubernetes driver's tests.

This is not Kubernetes. It implements, over real HTTP on 127.0.0.1 (so the real
kubernetes-asyncio client talks to it), only the calls the driver makes, and honestly:

- pods and services of a namespace: create (409 AlreadyExists), get, list with a label
  selector (``k=v``, ``k!=v``, ``k``, ``!k``), delete (404 NotFound);
- one global resourceVersion counter stamped on every change; lists return it;
- watches of pods as JSON lines (``ADDED``/``MODIFIED``/``DELETED``) of every change
  after the requested resourceVersion, ``timeoutSeconds`` honoured, and an ``ERROR``
  event with a 410 Status when that version has been expired (``force_gone``);
- pod deletion as the API server and kubelet do it: a pod that has finished, or is
  deleted with ``gracePeriodSeconds=0``, is removed at once; a running one gets a
  ``deletionTimestamp`` and stays until the test plays the kubelet (``finish_deletion``);
- secrets: create (409 AlreadyExists), get; kept as sent (``stringData`` is not folded
  into base64 ``data`` as the API server would);
- deleting a Service with background propagation deletes the pods and secrets it owns
  (garbage collection by owner uid), at once;
- pod logs, plain text, as the kubelet serves them: ``follow`` streams until the pod
  finishes (or is removed); ``timestamps`` prefixes each line with the time it was
  written (RFC 3339, nanoseconds, trailing zeros dropped, as Go's ``RFC3339Nano``) and a
  space, once per line even when the line came in pieces; ``sinceTime`` leaves out the
  lines written before it; 400 while the container has not started. The test scripts
  the output (``append_log``), and may stamp it with times of its choosing, equal ones
  included, to show what a resumed stream must not repeat;
- ``pods/exec`` and ``pods/portforward`` WebSockets, their framing as the API server
  speaks it, over a scripted process (``fake_kube_exec.py``; ``streams``).

There is no scheduler and no kubelet: the test scripts pod status (``set_status``) and
the status builders below produce what a kubelet would write. No admission, no
validation of specs (the manifest tests validate against the OpenAPI schema instead),
no garbage collection of pods whose owner never existed, no bookmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tests.launcher.fake_kube_exec import PodStreams
from tests.launcher.kubelet_logs import LogLine, parse_rfc3339

Object = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> Object:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _error(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(_status(code, reason, message), status=code)


def matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


# -- what a kubelet would write ------------------------------------------------------


def container(state: Object) -> Object:
    return {"containerStatuses": [{"name": "task", "ready": "running" in state, "state": state}]}


def running() -> Object:
    return {"phase": "Running", **container({"running": {"startedAt": _now()}})}


def terminated(code: int, reason: str = "Error", phase: str | None = None, **extra: Any) -> Object:
    state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": _now(), "finishedAt": _now()}}
    return {"phase": phase or ("Succeeded" if code == 0 else "Failed"), **container(state), **extra}


def waiting(reason: str, message: str = "") -> Object:
    return {"phase": "Pending", **container({"waiting": {"reason": reason, "message": message}})}


class FakeKubeApi:
    def __init__(self) -> None:
        self.pods: dict[str, Object] = {}
        self.services: dict[str, Object] = {}
        self.secrets: dict[str, Object] = {}
        self.logs: dict[str, list[LogLine]] = {}
        self.log_requests: list[dict[str, str]] = []  # the query of each log request
        self._logs_flowing = asyncio.Event()  # cleared by hold_logs
        self._logs_flowing.set()
        self.calls: list[tuple[str, str, dict[str, str]]] = []  # (method, path, query) of each request
        self.deletions: list[tuple[str, str, int | None]] = []  # (kind, name, grace)
        self._version = 0
        self._expired_through = 0
        self._history: list[tuple[int, str, Object]] = []  # (version, type, pod)
        self._changed = asyncio.Event()
        self._watch_epoch = 0
        self._closing = False
        self._runner: web.AppRunner | None = None
        self.streams = PodStreams(self)
        self.url = ""

    # -- lifecycle --------------------------------------------------------------

    async def start(self) -> str:
        app = web.Application()
        pods = "/api/v1/namespaces/{ns}/pods"
        services = "/api/v1/namespaces/{ns}/services"
        app.router.add_post(pods, self._create_pod)
        app.router.add_get(pods, self._list_pods)
        app.router.add_get(pods + "/{name}", self._get_pod)
        app.router.add_delete(pods + "/{name}", self._delete_pod)
        app.router.add_get(pods + "/{name}/log", self._pod_log)
        self.streams.routes(app, pods)
        app.router.add_post(services, self._create_service)
        app.router.add_get(services, self._list_services)
        app.router.add_get(services + "/{name}", self._get_service)
        app.router.add_delete(services + "/{name}", self._delete_service)
        secrets = "/api/v1/namespaces/{ns}/secrets"
        app.router.add_post(secrets, self._create_secret)
        app.router.add_get(secrets + "/{name}", self._get_secret)
        app.middlewares.append(self._record)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self.url

    async def close(self) -> None:
        self._closing = True
        self._logs_flowing.set()
        self._notify()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.calls.append((request.method, request.path, dict(request.query)))
        response: web.StreamResponse = await handler(request)
        return response

    # -- scripting, as the kubelet / etcd would ---------------------------------

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _stamp(self, kind: str, pod: Object) -> None:
        self._version += 1
        pod["metadata"]["resourceVersion"] = str(self._version)
        self._history.append((self._version, kind, json.loads(json.dumps(pod))))
        self._notify()

    def set_status(self, name: str, status: Object) -> None:
        pod = self.pods[name]
        pod["status"] = {**status}
        self._stamp("MODIFIED", pod)

    def append_log(self, name: str, data: bytes, at: int | None = None) -> None:
        """The container writes ``data``: each new line stamped ``at`` (nanoseconds since
        the epoch; default now). A line left without its newline goes on with ``data``."""
        lines = self.logs.setdefault(name, [])
        nanos = time.time_ns() if at is None else at
        for piece in data.splitlines(keepends=True):
            if lines and not lines[-1].data.endswith(b"\n"):
                lines[-1].data += piece
            else:
                lines.append(LogLine(nanos, bytearray(piece)))
        self._notify()

    def hold_logs(self) -> None:
        """Play a kubelet slow to pass output on: followed logs send nothing new (nor
        end) until ``release_logs``. (A real one notices a container's end seconds late.)"""
        self._logs_flowing.clear()

    def release_logs(self) -> None:
        self._logs_flowing.set()

    def log_text(self, name: str) -> bytes:
        return b"".join(line.render(False) for line in self.logs.get(name, []))

    def remove_pod(self, name: str) -> None:
        """The object goes away (kubelet's final delete, GC, or someone's ``kubectl delete``)."""
        pod = self.pods.pop(name)
        self._stamp("DELETED", pod)

    def finish_deletion(self, name: str, exit_code: int = 143) -> None:
        """Play the kubelet after a graceful delete: the container ends, the pod goes."""
        self.set_status(name, terminated(exit_code, "Error"))
        self.remove_pod(name)

    def force_gone(self) -> None:
        """Compact history: every version so far is expired; open watches are cut."""
        self._expired_through = self._version
        self._history.clear()
        self._watch_epoch += 1
        self._notify()

    def break_watches(self) -> None:
        """Cut open watch streams (a dropped connection); history is kept."""
        self._watch_epoch += 1
        self._notify()

    def pod_lists(self) -> int:
        """How many times pods were listed (not watched)."""
        return sum(
            1
            for m, path, query in self.calls
            if m == "GET" and path.endswith("/pods") and "watch" not in query
        )

    # -- pods -----------------------------------------------------------------------

    def _new_object(self, body: Object, ns: str) -> Object:
        body.setdefault("metadata", {})
        body["metadata"].update({"namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": _now()})
        return body

    async def _create_pod(self, request: web.Request) -> web.Response:
        body = self._new_object(await request.json(), request.match_info["ns"])
        name = body["metadata"]["name"]
        if name in self.pods:
            return _error(409, "AlreadyExists", f'pods "{name}" already exists')
        body["status"] = {"phase": "Pending"}
        self.pods[name] = body
        self._stamp("ADDED", body)
        return web.json_response(body, status=201)

    async def _get_pod(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.pods:
            return _error(404, "NotFound", f'pods "{name}" not found')
        return web.json_response(self.pods[name])

    async def _delete_pod(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        grace_text = request.query.get("gracePeriodSeconds")
        grace = int(grace_text) if grace_text is not None else None
        self.deletions.append(("pod", name, grace))
        if name not in self.pods:
            return _error(404, "NotFound", f'pods "{name}" not found')
        pod = self.pods[name]
        if grace == 0 or pod.get("status", {}).get("phase") in TERMINAL:
            self.remove_pod(name)
        elif not pod["metadata"].get("deletionTimestamp"):
            pod["metadata"]["deletionTimestamp"] = _now()
            pod["metadata"]["deletionGracePeriodSeconds"] = grace
            self._stamp("MODIFIED", pod)
        return web.json_response(pod)

    async def _list_pods(self, request: web.Request) -> web.StreamResponse:
        selector = request.query.get("labelSelector", "")
        if request.query.get("watch", "").lower() in ("true", "1"):
            return await self._watch(request, selector)
        items = [p for p in self.pods.values() if matches(selector, p["metadata"].get("labels", {}))]
        return web.json_response(
            {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._version)},
                "items": items,
            }
        )

    async def _watch(self, request: web.Request, selector: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        since = request.query.get("resourceVersion", "")
        with contextlib.suppress(ConnectionResetError):  # the client went away, as watch clients do
            await self._stream_events(request, response, selector, since)
        return response

    async def _stream_events(
        self, request: web.Request, response: web.StreamResponse, selector: str, since: str
    ) -> None:
        deadline = asyncio.get_running_loop().time() + float(request.query.get("timeoutSeconds", "1800"))
        epoch = self._watch_epoch

        async def send(kind: str, obj: Object) -> None:
            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        if since in ("", "0"):
            cursor = self._version
            for pod in list(self.pods.values()):
                if matches(selector, pod["metadata"].get("labels", {})):
                    await send("ADDED", pod)
        elif int(since) <= self._expired_through:
            await send(
                "ERROR", _status(410, "Expired", f"too old resource version: {since} ({self._version})")
            )
            return
        else:
            cursor = int(since)
        while not self._closing and epoch == self._watch_epoch:
            for version, kind, pod in [h for h in self._history if h[0] > cursor]:
                cursor = version
                if matches(selector, pod["metadata"].get("labels", {})):
                    await send(kind, pod)
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                break

    async def _pod_log(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        pod = self.pods.get(name)
        if pod is None:
            return _error(404, "NotFound", f'pods "{name}" not found')
        states = pod.get("status", {}).get("containerStatuses") or [{}]
        if not any(key in states[0].get("state", {}) for key in ("running", "terminated")):
            message = f'container "task" in pod "{name}" is waiting to start: ContainerCreating'
            return _error(400, "BadRequest", message)
        self.log_requests.append(dict(request.query))
        follow = request.query.get("follow", "").lower() in ("true", "1")
        timestamps = request.query.get("timestamps", "").lower() in ("true", "1")
        since = request.query.get("sinceTime")
        since_nanos = parse_rfc3339(since) if since else None
        if not follow:
            lines = [
                line for line in self.logs.get(name, []) if since_nanos is None or line.nanos >= since_nanos
            ]
            body = b"".join(line.render(timestamps) for line in lines)
            return web.Response(body=body, content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionResetError):  # the reader went away
            await self._follow_log(name, response, timestamps, since_nanos)
        return response

    async def _follow_log(
        self, name: str, response: web.StreamResponse, timestamps: bool, since_nanos: int | None
    ) -> None:
        index, offset = 0, 0  # the line being sent, and how much of it was
        while not self._closing:
            await self._logs_flowing.wait()
            changed = self._changed  # taken first: a change while writing is not missed
            lines = self.logs.get(name, [])
            out = bytearray()
            while index < len(lines):
                line = lines[index]
                if since_nanos is not None and line.nanos < since_nanos:
                    index += 1
                    continue
                out += line.render(timestamps, offset) if offset < len(line.data) else b""
                offset = len(line.data)
                if not line.data.endswith(b"\n"):
                    break  # it may go on: send the rest when it does
                index, offset = index + 1, 0
            if out:
                await response.write(bytes(out))
            current = self.pods.get(name)
            if current is None or current.get("status", {}).get("phase") in TERMINAL:
                break
            await changed.wait()

    # -- services -----------------------------------------------------------------

    async def _create_service(self, request: web.Request) -> web.Response:
        body = self._new_object(await request.json(), request.match_info["ns"])
        name = body["metadata"]["name"]
        if name in self.services:
            return _error(409, "AlreadyExists", f'services "{name}" already exists')
        self._version += 1
        body["metadata"]["resourceVersion"] = str(self._version)
        self.services[name] = body
        return web.json_response(body, status=201)

    async def _get_service(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.services:
            return _error(404, "NotFound", f'services "{name}" not found')
        return web.json_response(self.services[name])

    async def _list_services(self, request: web.Request) -> web.Response:
        selector = request.query.get("labelSelector", "")
        items = [s for s in self.services.values() if matches(selector, s["metadata"].get("labels", {}))]
        return web.json_response(
            {
                "kind": "ServiceList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._version)},
                "items": items,
            }
        )

    async def _delete_service(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.deletions.append(("service", name, None))
        service = self.services.pop(name, None)
        if service is None:
            return _error(404, "NotFound", f'services "{name}" not found')
        uid = service["metadata"]["uid"]
        for pod_name, pod in list(self.pods.items()):  # the garbage collector, at once
            if any(ref.get("uid") == uid for ref in pod["metadata"].get("ownerReferences", [])):
                self.remove_pod(pod_name)
        for secret_name, secret in list(self.secrets.items()):
            if any(ref.get("uid") == uid for ref in secret["metadata"].get("ownerReferences", [])):
                del self.secrets[secret_name]
        return web.json_response(service)

    # -- secrets ------------------------------------------------------------------

    async def _create_secret(self, request: web.Request) -> web.Response:
        body = self._new_object(await request.json(), request.match_info["ns"])
        name = body["metadata"]["name"]
        if name in self.secrets:
            return _error(409, "AlreadyExists", f'secrets "{name}" already exists')
        self._version += 1
        body["metadata"]["resourceVersion"] = str(self._version)
        self.secrets[name] = body
        return web.json_response(body, status=201)

    async def _get_secret(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.secrets:
            return _error(404, "NotFound", f'secrets "{name}" not found')
        return web.json_response(self.secrets[name])
