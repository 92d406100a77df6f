"""Answering ``corral.interactive.<node>.open`` for the nodes the launcher runs through
Kubernetes, as a node agent answers for its own node.

The API decided who may open what (owner, scope, the VC's switch) and recorded it; the
launcher decides only whether the request names a task it runs, and refuses anything
else with the reason: the attempt's pod must exist, carry that attempt, job and node in
its annotations and labels, and run (phase ``Running``, its container started). A
forward's port must be one the pod declares (the task's allocated ports, which
``manifests.py`` lists as container ports). Only then is the pod's WebSocket opened
(``exec.py``), and only once it is open does the answer say ``ok``: a refusal by the API
server reaches the user as an answer, not as a stream that closes at once.

Concurrency: one subscription per node (as ``task_logs.answer_for_nodes``: a request
for a node nobody answers for fails at once); NATS runs one ``answer`` at a time per
node, each bounded by ``CONNECT_TIMEOUT_S``. Every stream that opens is spliced in the
task group of ``serve``, so a launcher that stops closes them all, each with a reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from functools import partial
from typing import Literal

import aiohttp
from pydantic import ValidationError

from services.launcher.kubernetes.api import KubeApi, KubeApiError, NotFound, Object
from services.launcher.kubernetes.exec import PodSocketError, PodSockets, splice_exec, splice_forward
from services.launcher.kubernetes.manifests import CONTAINER_NAME
from services.launcher.kubernetes.names import (
    ATTEMPT_ID_ANNOTATION,
    JOB_LABEL,
    NODE_ANNOTATION,
    InvalidNameError,
    label_value,
    pod_name,
)
from services.launcher.kubernetes.status import pod_state
from shared.bus.nats import NatsBus
from shared.interactive.protocol import (
    INTERACTIVE_QUEUE,
    OpenAnswer,
    OpenRequest,
    from_node_subject,
    open_subject,
    to_node_subject,
)
from shared.interactive.stream import StreamEnd

log = logging.getLogger(__name__)

# The API waits about this long for an answer (CORRAL_API_INTERACTIVE_OPEN_TIMEOUT_S): a
# pod's WebSocket opened later would serve nobody (its stream ends when no pings come).
CONNECT_TIMEOUT_S = 5.0
Reason = Literal["not_running", "no_such_port", "refused", "failed"]


class Refused(Exception):
    """A request the launcher will not open; becomes the ``OpenAnswer`` it says."""

    def __init__(self, reason: Reason, error: str) -> None:
        super().__init__(error)
        self.answer = OpenAnswer(ok=False, reason=reason, error=error)


def _task(request: OpenRequest) -> str:
    return f"task {request.task_role}-{request.task_index} of job {request.job_id}"


def check_pod(pod: Object, request: OpenRequest, node_id: str) -> None:
    """``Refused`` unless ``pod`` runs the request's attempt on ``node_id`` (and, for a
    forward, declares its port)."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    if (
        annotations.get(ATTEMPT_ID_ANNOTATION) != request.attempt_id
        or annotations.get(NODE_ANNOTATION) != node_id
        or labels.get(JOB_LABEL) != label_value(request.job_id)
    ):
        raise Refused("not_running", f"{_task(request)} does not run on node {node_id}")
    state = pod_state(pod)
    if not state.running:
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        said = (
            state.ended.reason
            if state.ended is not None
            else f"its pod is {phase}, its container not started"
        )
        raise Refused("not_running", f"{_task(request)} is not running: {said}")
    if request.kind == "forward":
        containers = (pod.get("spec") or {}).get("containers") or []
        task: Object = next((c for c in containers if c.get("name") == CONTAINER_NAME), {})
        declared = sorted(int(p["containerPort"]) for p in task.get("ports") or [] if "containerPort" in p)
        if request.port not in declared:
            ports = ", ".join(map(str, declared)) or "none"
            raise Refused(
                "no_such_port",
                f"{_task(request)} has no port {request.port} ({request.port_label or 'unlabelled'}); "
                f"its ports: {ports}",
            )


class PodInteractive:
    """Opens exec and port-forward streams into the pods of the nodes it answers for."""

    def __init__(self, bus: NatsBus, sockets: PodSockets) -> None:
        self._bus = bus
        self._sockets = sockets
        self._pods = KubeApi(sockets.client, sockets.namespace)
        self._tg: asyncio.TaskGroup | None = None

    async def serve(self, nodes: Callable[[], Collection[str]], check_every_s: float) -> None:
        """Answer on ``open_subject(node)`` for every node ``nodes()`` holds, from the first
        check after it appears on; runs until cancelled, and its streams with it."""
        answering: set[str] = set()
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            try:
                while True:
                    for node_id in sorted(set(nodes()) - answering):
                        subject, handle = open_subject(node_id), partial(self.answer, node_id)
                        tg.create_task(self._bus.answer(subject, INTERACTIVE_QUEUE, handle), name=subject)
                        answering.add(node_id)
                    await asyncio.sleep(check_every_s)
            finally:
                self._tg = None

    async def answer(self, node_id: str, question: bytes) -> bytes:
        """The answer to one open request for ``node_id``; never raises."""
        try:
            request = OpenRequest.model_validate_json(question)
        except ValidationError as exc:
            said = f"refused: not an open request ({exc.error_count()} problems)"
            return OpenAnswer(ok=False, reason="refused", error=said).model_dump_json().encode()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await self._open(node_id, request)
        except Refused as refused:
            log.info(
                "refused %s into attempt %s for %s: %s",
                request.kind,
                request.attempt_id,
                request.user,
                refused,
            )
            return refused.answer.model_dump_json().encode()
        except TimeoutError:
            said = f"the Kubernetes API server did not open the {request.kind} within {CONNECT_TIMEOUT_S:g} s"
            return OpenAnswer(ok=False, reason="failed", error=said).model_dump_json().encode()
        return OpenAnswer(ok=True).model_dump_json().encode()

    async def _open(self, node_id: str, request: OpenRequest) -> None:
        if self._tg is None:
            raise Refused("failed", "the launcher is stopping")
        try:
            pod = await self._pods.read_pod(pod_name(request.attempt_id))
        except (NotFound, InvalidNameError) as exc:
            raise Refused("not_running", f"{_task(request)} has no pod (it ended, or never started)") from exc
        except (KubeApiError, aiohttp.ClientError, OSError) as exc:
            raise Refused("failed", f"could not read the pod of {_task(request)}: {exc}") from exc
        check_pod(pod, request, node_id)
        name = pod["metadata"]["name"]
        try:
            if request.kind == "exec":
                socket = await self._sockets.exec(name, request.command, stdin=request.stdin, tty=request.tty)
            else:
                socket = await self._sockets.forward(name, request.port)
        except PodSocketError as exc:
            raise Refused("failed", str(exc)) from exc
        end = StreamEnd(
            self._bus.nc,
            send_subject=from_node_subject(node_id, request.stream_id),
            recv_subject=to_node_subject(node_id, request.stream_id),
        )
        try:
            await end.open()
        except BaseException:
            await socket.close()
            raise
        if request.kind == "exec":
            splice = splice_exec(
                end,
                socket,
                tty=request.tty,
                cols=request.cols,
                rows=request.rows,
                idle_timeout_s=request.idle_timeout_s,
            )
        else:
            splice = splice_forward(end, socket, port=request.port, idle_timeout_s=request.idle_timeout_s)
        what = " ".join(request.command) if request.kind == "exec" else f"port {request.port}"
        log.info("%s into pod %s for %s: %s", request.kind, name, request.user, what or "a shell")
        self._tg.create_task(splice, name=f"{request.kind} {request.stream_id}")
