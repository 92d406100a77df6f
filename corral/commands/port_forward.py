"""``corral port-forward JOB LOCAL:LABEL... [--task T] [--address 127.0.0.1]``.

    corral port-forward job-01m8... 8888:jupyter          # then http://127.0.0.1:8888
    corral port-forward job-01m8... :http --task worker-1  # any free local port (printed)

Listens on each local port and, for every connection accepted there, makes one session
to the task's port with that label and copies bytes both ways, as ``kubectl
port-forward`` does, with TCP's half-close passed on each way. A label names the port
rather than a number because a task's ports are allocated at launch (``ports: {http:
1}`` in its spec; the task reads ``$CORRAL_PORT_<LABEL>``); the API maps the label to
the number.

Before listening, the job is read once: it must be running and the task must have the
label, so a mistake is said at once rather than at the first connection. Later, when a
connection finds the job gone (not running, no longer yours), the command says so and
ends with 1; a connection that fails for another reason is said and closed, and the
others go on. It runs until Ctrl-C (130).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass, field
from typing import Annotated

import typer

from corral.commands.errors import UsageProblem
from corral.commands.output import echo
from corral.commands.session import client, interactive
from corral.commands.targets import Target, check_label, check_running, target
from corral.sdk import ApiError, ConnectionFailed
from corral.sdk.channels import DATA, ERROR
from corral.sdk.interactive import Interactive, SessionStream

READ_CHUNK = 64 * 1024
# How long Ctrl-C waits for the open sessions to be left politely before dropping them.
LEAVE_WITHIN_S = 2.0
# Refusals that no later connection will escape: the job or task is gone, or not ours.
FINAL_STATUSES = frozenset({401, 403, 404, 409})


@dataclass(frozen=True)
class Mapping:
    local_port: int  # 0: any free port
    label: str


def parse_mapping(text: str) -> Mapping:
    local, sep, label = text.rpartition(":")
    if not sep or not label:
        raise UsageProblem(f"{text!r}: give LOCAL:LABEL, e.g. 8888:http (or :http for any free port)")
    if local and not (local.isdigit() and int(local) <= 65_535):
        raise UsageProblem(f"{text!r}: the local port {local!r} is not a port number (0-65535)")
    return Mapping(int(local or 0), label)


@dataclass
class Forwarder:
    api: Interactive
    job_id: str
    task: str
    gone: asyncio.Future[ApiError]
    # The connections being served, each with its local side: ended when the command ends.
    active: dict[asyncio.Task[None], asyncio.StreamWriter] = field(default_factory=dict)

    async def serve(self, address: str, mapping: Mapping) -> asyncio.Server:
        handler = functools.partial(self.connection, mapping.label)
        server = await asyncio.start_server(handler, address, mapping.local_port)
        port = server.sockets[0].getsockname()[1]
        echo(f"Forwarding {address}:{port} -> {self.task}:{mapping.label}")
        return server

    async def connection(
        self, label: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        this = asyncio.current_task()
        assert this is not None
        self.active[this] = writer
        try:
            await self._forward(label, reader, writer)
        finally:
            del self.active[this]

    async def end_connections(self) -> None:
        """End every connection still served: a listening server waits, as it closes, for
        each connection it accepted to close, so one whose session is still open would
        keep Ctrl-C from ending the command. Each session is left politely (a WebSocket
        close handshake) for up to ``LEAVE_WITHIN_S``, then dropped."""
        for task, writer in list(self.active.items()):
            task.cancel()
            writer.close()
        if self.active:
            _, slow = await asyncio.wait(list(self.active), timeout=LEAVE_WITHIN_S)
            for task in slow:
                task.cancel()  # interrupts its close handshake
            await asyncio.gather(*slow, return_exceptions=True)

    async def _forward(self, label: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            stream = await self.api.port_forward(self.job_id, label, task=self.task)
        except ApiError as refused:
            if refused.status in FINAL_STATUSES:
                if not self.gone.done():
                    self.gone.set_result(refused)
            else:
                typer.echo(f"corral port-forward: {refused}", err=True)
            writer.close()
            return
        except ConnectionFailed as failed:
            typer.echo(f"corral port-forward: {failed}", err=True)
            writer.close()
            return
        try:
            await copy_both_ways(stream, reader, writer)
        finally:
            await stream.close()
            writer.close()


async def copy_both_ways(
    stream: SessionStream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Until the session ends. The local side's end of input is passed on as a TCP
    half-close (the task's app reads end-of-file and may still answer), as a direct
    connection would behave; the session ends when the task's side closes too, or the
    local side can no longer be written to."""

    async def to_task() -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(READ_CHUNK):
                await stream.write(data)
        await stream.close_stdin()

    async def from_task() -> None:
        while (received := await stream.receive()) is not None:
            channel, data = received
            if channel == DATA:
                writer.write(data)
                await writer.drain()
            elif channel == ERROR and data:
                typer.echo(f"corral port-forward: {data.decode(errors='replace').strip()}", err=True)

    with contextlib.suppress(OSError):
        async with asyncio.TaskGroup() as group:
            sending = group.create_task(to_task())
            await group.create_task(from_task())
            sending.cancel()


async def forward(
    ctx: typer.Context, job_id: str, chosen: Target, mappings: list[Mapping], address: str
) -> None:
    async with interactive(ctx) as api, contextlib.AsyncExitStack() as servers:
        gone: asyncio.Future[ApiError] = asyncio.get_running_loop().create_future()
        forwarder = Forwarder(api, job_id, chosen.name, gone)
        for mapping in mappings:
            try:
                server = await forwarder.serve(address, mapping)
            except OSError as exc:
                raise UsageProblem(
                    f"cannot listen on {address}:{mapping.local_port}: {exc.strerror}"
                ) from exc
            await servers.enter_async_context(server)
        try:
            raise await gone
        finally:
            await forwarder.end_connections()


def register(app: typer.Typer) -> None:
    @app.command("port-forward")
    def port_forward(
        ctx: typer.Context,
        job_id: Annotated[str, typer.Argument(metavar="JOB")],
        mappings: Annotated[
            list[str],
            typer.Argument(metavar="LOCAL:LABEL...", help="e.g. 8888:jupyter; :http for any free port"),
        ],
        task: Annotated[
            str | None, typer.Option("--task", help="<role>-<index>, e.g. worker-1 (default: the first)")
        ] = None,
        address: Annotated[
            str, typer.Option("--address", help="the local address to listen on")
        ] = "127.0.0.1",
    ) -> None:
        """Forward local ports to a running task's labelled ports (until Ctrl-C)."""
        parsed = [parse_mapping(text) for text in mappings]
        with client(ctx) as api:
            job = api.get_job(job_id)
        chosen = target(job, task)
        for mapping in parsed:
            check_label(job, chosen, mapping.label)
        check_running(job)
        asyncio.run(forward(ctx, job_id, chosen, parsed, address))
