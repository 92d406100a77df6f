"""The node's answer to the API's open requests, and the sessions it runs.

The API decided who may open what (its tokens, scopes and audit); the node decides
only whether it can: the attempt must be one this agent runs, running now, and the task
the request names (job, role, index); a forward's port must be one the task was
allocated, and (sandboxed) listened on by the task's own processes, not another
tenant's that bound it (``listeners``). Anything else is refused with the reason in
words (``OpenAnswer``), never a timeout. The stream is subscribed before the answer,
so the API's first frames find it.

Concurrency: the bus calls ``answer`` for one request at a time; it starts the session
as an asyncio task in the agent's TaskGroup and returns. The agent's watcher calls
``task_ended`` when a task ends: every session of that attempt ends with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Literal

from nats.aio.client import Client
from pydantic import ValidationError

from services.launcher.agent.agent import NodeAgent
from services.launcher.agent.interactive import commands, listeners
from services.launcher.agent.interactive.commands import ExecTarget
from services.launcher.agent.interactive.exec_session import ExecSession
from services.launcher.agent.interactive.forward_session import ForwardSession
from services.launcher.agent.sandbox.joining import NotJoinable, environment_of, running_task
from services.launcher.agent.sandbox.sandbox import SandboxProblem
from services.launcher.agent.tasks import Task
from shared.interactive.protocol import OpenAnswer, OpenRequest, from_node_subject, to_node_subject
from shared.interactive.stream import StreamEnd

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
Session = ExecSession | ForwardSession


class Refused(Exception):
    """An open request this node does not serve; ``answer`` says why."""

    def __init__(self, answer: OpenAnswer) -> None:
        super().__init__(answer.error)
        self.answer = answer


def _refused(reason: Literal["not_running", "no_such_port", "refused", "failed"], error: str) -> Refused:
    return Refused(OpenAnswer(ok=False, reason=reason, error=error))


class InteractiveServer:
    def __init__(self, nc: Client, node_id: str, agent: NodeAgent, tg: asyncio.TaskGroup) -> None:
        self._nc = nc
        self._node_id = node_id
        self._agent = agent
        self._tg = tg
        self._sessions: dict[str, dict[str, Session]] = {}  # attempt -> stream id -> session

    def sessions_of(self, attempt_id: str) -> int:
        return len(self._sessions.get(attempt_id, {}))

    def task_ended(self, attempt_id: str) -> None:
        for session in list(self._sessions.get(attempt_id, {}).values()):
            session.end("the task ended")

    async def answer(self, raw: bytes) -> bytes:
        """The answer to one open request (never raises)."""
        try:
            request = OpenRequest.model_validate_json(raw)
        except ValidationError as exc:
            said = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return _said(OpenAnswer(ok=False, reason="refused", error=f"not an open request: {said}"))
        try:
            await self._open(request)
        except Refused as refused:
            return _said(refused.answer)
        except Exception:
            log.exception("could not open %s stream %s", request.kind, request.stream_id)
            error = "the node could not open the stream (its agent's log says why)"
            return _said(OpenAnswer(ok=False, reason="failed", error=error))
        return _said(OpenAnswer(ok=True))

    async def _open(self, request: OpenRequest) -> None:
        task = self._running(request)
        if request.stream_id in self._sessions.get(request.attempt_id, {}):
            raise _refused("refused", f"stream {request.stream_id} is open already")
        stream = StreamEnd(
            self._nc,
            send_subject=from_node_subject(self._node_id, request.stream_id),
            recv_subject=to_node_subject(self._node_id, request.stream_id),
        )
        session: Session
        if request.kind == "exec":
            target = self._exec_target(task, request)
            await stream.open()
            try:
                process = commands.start(
                    target, tty=request.tty, stdin=request.stdin, cols=request.cols, rows=request.rows
                )
            except OSError as exc:
                await stream.close("the command could not be started")
                raise _refused("failed", f"the command could not be started: {exc}") from exc
            session = ExecSession(stream, process, idle_timeout_s=request.idle_timeout_s)
        else:
            port = self._port(task, request)
            checked = await self._listened_by_task(task, port)
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port), CONNECT_TIMEOUT_S
                )
            except (OSError, TimeoutError) as exc:
                # Not a refusal of the caller: the app is not up (yet), which the API
                # says as a bad gateway, as a reverse proxy would.
                raise _refused(
                    "failed", f"nothing accepts connections on port {port} of the task ({exc})"
                ) from exc
            try:
                if checked is not None:
                    await self._still_listened(checked, port)
                await stream.open()
            except BaseException:
                writer.close()
                raise
            session = ForwardSession(stream, reader, writer, port=port, idle_timeout_s=request.idle_timeout_s)
        self._sessions.setdefault(request.attempt_id, {})[request.stream_id] = session
        self._tg.create_task(self._run(session, request), name=f"interactive-{request.stream_id}")

    def _running(self, request: OpenRequest) -> Task:
        """The agent's task the request names, running; ``Refused`` (``not_running``) with
        its state in words otherwise."""
        task = self._agent.task(request.attempt_id)
        here = f"on node {self._node_id}"
        if task is None:
            raise _refused("not_running", f"attempt {request.attempt_id} is not running {here}")
        named = f"{request.task_role}-{request.task_index} of {request.job_id}"
        actual = f"{task.role}-{task.index} of {task.job_id}"
        if actual != named:
            raise _refused("not_running", f"attempt {request.attempt_id} {here} is {actual}, not {named}")
        if task.fenced:
            raise _refused("not_running", f"task {named} was taken from this node and is being killed")
        if task.ended:
            raise _refused("not_running", f"task {named} has ended")
        if task.stop_reason is not None:
            raise _refused("not_running", f"task {named} is stopping ({task.stop_reason})")
        if task.pid is None:
            raise _refused("not_running", f"task {named} is starting; try again in a moment")
        return task

    def _exec_target(self, task: Task, request: OpenRequest) -> ExecTarget:
        assert task.pid is not None
        argv = commands.command_argv(request.command)
        workdir = self._agent.work_dir_of(task.job_id)
        sandbox = self._agent.sandbox
        try:
            if sandbox is None:
                return ExecTarget(argv, environment_of(task.pid), workdir, sandboxed=False)
            running = running_task(task.pid)
            helper_argv = sandbox.join_argv(
                attempt_id=task.attempt_id,
                job_id=task.job_id,
                task=running,
                workdir=workdir,
                command=argv,
                tty=request.tty,
            )
        except NotJoinable as exc:
            raise _refused("not_running", str(exc)) from exc
        except SandboxProblem as exc:
            raise _refused("failed", str(exc)) from exc
        return ExecTarget(helper_argv, running.env, None, sandboxed=True)

    def _port(self, task: Task, request: OpenRequest) -> int:
        """The port to connect to: one the task was allocated (under the label, if named)."""
        port = request.port
        if request.port_label:
            allowed = task.ports.get(request.port_label, [])
        else:
            allowed = [p for ports in task.ports.values() for p in ports]
        if port not in allowed:
            labels = ", ".join(f"{label} {ports}" for label, ports in sorted(task.ports.items())) or "none"
            named = f"{request.port_label} ({port})" if request.port_label else str(port)
            raise _refused("no_such_port", f"port {named} is not one of the task's; its ports: {labels}")
        return port

    async def _listened_by_task(self, task: Task, port: int) -> set[int] | None:
        """The sockets listening on ``port``, once checked to be the task's own;
        ``Refused`` when nothing listens or a process outside the task does.

        An unsandboxed task has no cgroup to tell its processes from others (it runs
        as the agent's user, on a node that does not separate tenants): the allocated
        port is all that is checked there, and None says so."""
        if task.cgroup is None:
            return None
        cgroup = task.cgroup
        owner, inodes = await asyncio.to_thread(lambda: listeners.owner_of_port(port, cgroup.processes()))
        if owner == "nobody":
            raise _refused("failed", f"nothing accepts connections on port {port} of the task")
        if owner == "other":
            raise _refused(
                "refused", f"port {port} is held by a process that is not the task's; nothing was forwarded"
            )
        return inodes

    async def _still_listened(self, checked: set[int], port: int) -> None:
        """``Refused`` unless the listener the connection reached is one checked: the
        task's server could have exited, and another process bound the port, between
        the check and the connection. (Socket inodes are never reused, so the same
        inodes still listening means the same sockets.)"""
        now = await asyncio.to_thread(listeners.listening_sockets, port)
        if not now or not now <= checked:
            raise _refused(
                "refused", f"port {port} changed hands while connecting; nothing was forwarded, try again"
            )

    async def _run(self, session: Session, request: OpenRequest) -> None:
        started = time.monotonic()
        who = f"{request.user} on attempt {request.attempt_id} ({request.task_role}-{request.task_index})"
        what = " ".join(request.command) if request.kind == "exec" else f"port {request.port}"
        log.info("%s session %s opened for %s: %s", request.kind, request.stream_id, who, what)
        reason = "the agent stopped"
        try:
            reason = await session.run()
        finally:
            attempt = self._sessions.get(request.attempt_id, {})
            attempt.pop(request.stream_id, None)
            if not attempt:
                self._sessions.pop(request.attempt_id, None)
            log.info(
                "%s session %s for %s closed after %.1f s: %s",
                request.kind,
                request.stream_id,
                who,
                time.monotonic() - started,
                reason,
            )


def _said(answer: OpenAnswer) -> bytes:
    return answer.model_dump_json(exclude_none=True).encode()
