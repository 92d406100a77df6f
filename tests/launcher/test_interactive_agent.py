"""Exec and port-forward into running tasks, through a real node agent over real NATS.

Each test drives the agent's ``InteractiveServer`` as the API does (``interactive_clients``)
and runs real sandboxed tasks: what a joined command sees (the task's environment, uid,
cgroup and processes, never root's or the host's), its terminal (input, resizes, exit
codes), the ends of a session (the command's, the task's, a malformed frame's: that
session alone), and forwards to a task's own port only.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from services.launcher.agent.processes import TaskFiles, process_start_ticks, spawn_sandboxed
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.interactive.protocol import DATA, Channel, exit_code_of, resize_payload
from shared.jobs import Resources
from tests.launcher import attempts
from tests.launcher.interactive_clients import NODE, open_session, running_node, wait_for
from tests.launcher.sandboxes import DYNAMIC_UIDS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")


def _exec(attempt_id: str, job_id: str, command: list[str], **fields: object) -> dict[str, object]:
    return {
        "kind": "exec",
        "attempt_id": attempt_id,
        "job_id": job_id,
        "task_role": "worker",
        "task_index": 0,
        "command": command,
        **fields,
    }


async def test_a_command_runs_as_the_task_not_as_root(db: Database, bus: NatsBus, tmp_path: Path) -> None:
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600")
        script = "echo rank=$RANK; id -u; ls /proc | grep -c '^[0-9]'; cat /proc/self/cgroup"
        session = await open_session(node.nc, **_exec(attempt_id, job_id, ["sh", "-c", script], tty=False))
        assert session.answer.ok, session.answer
        assert await session.until_closed() == ""
        rank, uid, processes, *cgroups = session.said().splitlines()
        assert rank == "rank=0"  # the task's own environment
        assert DYNAMIC_UIDS[0] <= int(uid) <= DYNAMIC_UIDS[1]
        # The task's pid namespace: its init, its sleep, the shell, ls, grep. Not the host's.
        assert int(processes) <= 6
        assert any(attempt_id in line for line in cgroups)  # the task's cgroup
        assert exit_code_of(session.status or b"") == 0
        assert node.agent.task(attempt_id) is not None  # the task runs on


async def test_a_terminal_echoes_input_resizes_and_ends_with_the_exit_code(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600")
        session = await open_session(
            node.nc, **_exec(attempt_id, job_id, ["/bin/sh", "-c", "cat; read x; stty size; exit 3"], cols=80)
        )
        assert session.answer.ok, session.answer
        await session.send(Channel.STDIN, b"hello there\n")
        said = await session.read_until(b"hello there\r\nhello there\r\n")  # the echo, then cat's copy
        assert said.count(b"hello there") == 2
        await session.send(Channel.STDIN, b"\x04")  # ^D: cat's end of input
        await session.send(Channel.RESIZE, resize_payload(132, 43))
        await session.send(Channel.STDIN, b"\n")
        assert await session.until_closed() == ""
        assert "43 132" in session.said()
        assert exit_code_of(session.status or b"") == 3


async def test_an_attempt_that_is_not_running_here_is_refused(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600")
        elsewhere = await open_session(node.nc, **_exec("att-elsewhere", job_id, []))
        assert (elsewhere.answer.ok, elsewhere.answer.reason) == (False, "not_running")
        assert f"att-elsewhere is not running on node {NODE}" in (elsewhere.answer.error or "")
        other_task = await open_session(node.nc, **_exec(attempt_id, job_id, [], task_index=1))
        assert other_task.answer.reason == "not_running"
        assert "is worker-0 of" in (other_task.answer.error or "")


async def test_the_task_ending_ends_its_sessions(db: Database, bus: NatsBus, tmp_path: Path) -> None:
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600")
        session = await open_session(node.nc, **_exec(attempt_id, job_id, ["sleep", "600"], tty=False))
        assert session.answer.ok
        await wait_for(lambda: node.server.sessions_of(attempt_id) == 1, "the session to start")
        node.agent.stop(attempt_id, "the test stops it", grace_s=1.0)
        assert await session.until_closed() == "the task ended"
        await wait_for(lambda: node.server.sessions_of(attempt_id) == 0, "the session to be gone")


async def test_a_malformed_frame_ends_that_session_alone(db: Database, bus: NatsBus, tmp_path: Path) -> None:
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600")
        bad_resize = await open_session(node.nc, **_exec(attempt_id, job_id, ["sleep", "600"]))
        wrong_channel = await open_session(node.nc, **_exec(attempt_id, job_id, ["sleep", "600"]))
        bystander = await open_session(
            node.nc, **_exec(attempt_id, job_id, ["/bin/sh", "-c", "read x; echo $x"])
        )
        await bad_resize.send(Channel.RESIZE, b"{not json")
        assert "a malformed frame" in (await bad_resize.until_closed() or "")
        await wrong_channel.send(Channel.STATUS, b"{}")  # the node's channel, not the client's
        assert "channel 3 carries nothing to a command" in (await wrong_channel.until_closed() or "")
        await bystander.send(Channel.STDIN, b"still here\n")
        assert await bystander.until_closed() == ""
        assert "still here" in bystander.said()
        task = node.agent.task(attempt_id)
        assert task is not None
        assert not task.ended


async def test_a_frame_that_breaks_the_framing_ends_the_session(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    """Bytes that are not a frame at all (published past the client's ``StreamEnd``)."""
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600")
        session = await open_session(node.nc, **_exec(attempt_id, job_id, ["sleep", "600"], tty=False))
        stream_id = session.stream._send_subject.rsplit(".", 1)[1]
        await node.nc.publish(f"corral.interactive.{NODE}.in.{stream_id}", b"\x00")
        assert "malformed" in (await session.until_closed() or "")
        await wait_for(lambda: node.server.sessions_of(attempt_id) == 0, "the session to end")
        assert not node.agent.task(attempt_id).ended  # type: ignore[union-attr]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_forward_reaches_the_tasks_own_port_and_no_other(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    port = _free_port()
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task(
            f"echo hello > page.txt; exec /usr/bin/python3 -m http.server {port} --bind 127.0.0.1",
            ports={"http": [port]},
        )
        forward: dict[str, object] = {"kind": "forward", "attempt_id": attempt_id, "job_id": job_id}
        forward |= {"task_role": "worker", "task_index": 0}

        async def listening() -> bool:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return False
            writer.close()
            return True

        for _ in range(200):
            if await listening():
                break
            await asyncio.sleep(0.05)
        session = await open_session(node.nc, **forward, port=port, port_label="http")
        assert session.answer.ok, session.answer
        await session.send(DATA, b"GET /page.txt HTTP/1.0\r\nHost: x\r\n\r\n")
        await session.send(Channel.EOF)  # the client's half-close; the server's comes back
        assert await session.until_closed() == ""
        assert Channel.EOF in session.output
        response = session.said(DATA)
        assert response.startswith("HTTP/1.0 200")
        assert response.endswith("hello\n")

        other = await open_session(node.nc, **forward, port=5432, port_label="http")
        assert (other.answer.ok, other.answer.reason) == (False, "no_such_port")
        assert f"http [{port}]" in (other.answer.error or "")
        unknown_label = await open_session(node.nc, **forward, port=port, port_label="ssh")
        assert unknown_label.answer.reason == "no_such_port"


async def test_an_unsandboxed_node_runs_the_command_in_the_tasks_directory_and_environment(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    async with running_node(db, bus, tmp_path, sandboxed=False) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600")
        session = await open_session(node.nc, **_exec(attempt_id, job_id, ["sh", "-c", "echo $RANK; pwd"]))
        assert session.answer.ok, session.answer
        assert await session.until_closed() == ""
        assert session.said().split() == ["0", str(tmp_path / "work" / job_id)]


async def test_closing_the_stream_kills_what_the_command_started(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600")
        session = await open_session(node.nc, **_exec(attempt_id, job_id, []))
        await session.send(Channel.STDIN, b"sleep 777 & sleep 778 & echo started-$((6*7))\n")
        await session.read_until(b"started-42")
        task = node.agent.task(attempt_id)
        assert task is not None
        assert task.cgroup is not None
        cgroup = task.cgroup

        def sleepers() -> int:
            return sum(b"sleep\x00" + b"77" in _cmdline(pid) for pid in cgroup.processes())

        await wait_for(lambda: sleepers() == 2, "both background jobs to run")
        await session.stream.close("the user went away")
        await wait_for(lambda: sleepers() == 0, "the session's processes to be killed")
        assert not task.ended


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


async def test_a_session_with_no_data_either_way_ends_at_its_idle_timeout(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    async with running_node(db, bus, tmp_path) as node:
        attempt_id, job_id = await node.run_task("exec sleep 600")
        session = await open_session(
            node.nc, **_exec(attempt_id, job_id, ["sleep", "600"], tty=False, idle_timeout_s=0.5)
        )
        assert session.answer.ok
        assert await session.until_closed(timeout_s=10) == "no data either way for 0.5 s"
        assert session.status is not None  # how the command ended, said before the close
        assert not node.agent.task(attempt_id).ended  # type: ignore[union-attr]


async def test_a_task_re_adopted_after_an_agent_restart_is_joined_as_before(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    """A task an earlier agent started (here: started as it would have, then recorded
    RUNNING with its pid) is re-adopted by ``reconcile``; an exec into it gets the same
    environment, uid and directory, and a forward the same ports, with nothing kept
    from the spawn."""
    port = _free_port()
    async with running_node(db, bus, tmp_path) as node:
        assert node.sandbox is not None
        (attempt_id,) = await attempts.assigned(db, NODE, instances=1, state="RUNNING")
        job_id = await db.fetchval("SELECT job_id FROM launcher.attempts WHERE id = $1", attempt_id)
        await db.execute(
            "UPDATE launcher.attempts SET ports = $2 WHERE id = $1", attempt_id, {"http": [port]}
        )
        files = TaskFiles.for_attempt(tmp_path / "state", attempt_id)
        files.pid_file.parent.mkdir(parents=True, exist_ok=True)
        log = tmp_path / "left-behind.log"
        launch = node.sandbox.prepare(
            attempt_id=attempt_id,
            job_id=job_id,
            username="alice",
            resources=Resources(cpus=1, memory_mb=256),
            gpu_indices=[],
            workdir=tmp_path / "work" / job_id,
            log_path=log,
            pid_file=files.pid_file,
            exit_file=files.exit_file,
            command="echo ready; exec sleep 600",
        )
        helper = spawn_sandboxed(launch.argv, {"PATH": "/usr/bin:/bin", "RANK": "5", **launch.env})
        try:
            await wait_for(lambda: "ready" in (log.read_text() if log.exists() else ""), "the task to start")
            await db.execute(
                "UPDATE launcher.attempts SET pid = $2, pid_start_ticks = $3 WHERE id = $1",
                attempt_id,
                helper.pid,
                process_start_ticks(helper.pid),
            )
            await node.agent.reconcile()
            task = node.agent.task(attempt_id)
            assert task is not None
            assert (task.pid, task.role, task.ports) == (helper.pid, "worker", {"http": [port]})

            session = await open_session(
                node.nc, **_exec(attempt_id, job_id, ["sh", "-c", "echo $RANK; id -u; pwd"])
            )
            assert session.answer.ok, session.answer
            assert await session.until_closed() == ""
            rank, uid, cwd = session.said().split()
            assert (rank, uid, cwd) == ("5", str(launch.identity.uid), str(tmp_path / "work" / job_id))
            forward = {"kind": "forward", "attempt_id": attempt_id, "job_id": job_id, "task_role": "worker"}
            elsewhere = await open_session(node.nc, **forward, task_index=0, port=5432)
            assert elsewhere.answer.reason == "no_such_port"
        finally:
            helper.kill()
            helper.wait(10)
