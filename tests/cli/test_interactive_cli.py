"""``corral exec``, ``port-forward``, ``notebook`` and ``tensorboard`` as a person runs them:
the CLI as a real process, against a whole stack of real processes (API → NATS → node
agent → a sandboxed task), on a terminal (a real PTY) or on pipes.

JupyterLab is not installed here, so the notebook test puts a stand-in ``jupyter`` on the
node's PATH (``tests/cli/standins/jupyter``, labelled as such: a small HTTP server that
takes JupyterLab's options and checks its token). TensorBoard is left missing on
purpose, to show what a user sees then."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from corral.local.ports import free_port
from corral.sdk.interactive import Interactive
from tests.e2e.stack import Stack, submit_spec, wait_state

STANDINS = Path(__file__).parent / "standins"
SERVE_HTTP = 'exec python3 -m http.server "$CORRAL_PORT_HTTP" --bind 127.0.0.1'


@pytest.fixture
async def stack(database_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    env = {
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_NATS_PORT": str(free_port()),
        # The node's tasks find the stand-in jupyter (the agent passes its PATH on).
        "PATH": f"{STANDINS}:{os.environ['PATH']}",
    }
    async with Stack(tmp_path / "home", env).running() as running:
        yield running


def _env(stack: Stack, token: str | None = None) -> dict[str, str]:
    return {**os.environ, "CORRAL_URL": stack.base_url, "CORRAL_TOKEN": token or stack.token()}


async def corral(
    stack: Stack, *args: str, stdin: bytes | None = None, token: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The command run to its end, its standard input ``stdin`` through a pipe (by
    default ``/dev/null``, as a script run by a scheduler has)."""

    def run() -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "corral", *args],
            env=_env(stack, token),
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            timeout=60,
            check=False,
        )

    return await asyncio.to_thread(run)


async def running_server(stack: Stack) -> str:
    """A running one-task job serving HTTP on its port labelled ``http``."""
    spec = {
        "name": "served",
        "tasks": [{"name": "main", "command": SERVE_HTTP, "ports": {"http": 1}, "resources": {"gpus": 1}}],
    }
    async with stack.client() as http:
        job_id = await submit_spec(http, spec)
        await wait_state(http, job_id, {"RUNNING"})
    return job_id


async def test_exec_runs_in_the_task_and_exits_with_the_commands_code(stack: Stack) -> None:
    job_id = await running_server(stack)

    done = await corral(stack, "exec", job_id, "-T", "--", "sh", "-c", "echo rank=$RANK uid=$(id -u); exit 3")
    assert done.returncode == 3, done.stderr
    rank, uid = done.stdout.decode().split()
    assert rank == "rank=0"
    assert uid != "uid=0", "the command runs as the task's user, not root"

    piped = await corral(stack, "exec", job_id, "-T", "--", "cat", stdin=b"hi\nthere\n")
    assert (piped.returncode, piped.stdout) == (0, b"hi\nthere\n"), piped.stderr

    apart = await corral(stack, "exec", job_id, "-T", "--", "sh", "-c", "echo out; echo err >&2", stdin=b"")
    assert (apart.returncode, apart.stdout, apart.stderr) == (0, b"out\n", b"err\n")

    async with Interactive(stack.base_url, stack.token()) as sdk:
        result = await sdk.run(job_id, ["sh", "-c", "echo $WORLD_SIZE; exit 4"])
        assert (result.exit_code, result.stdout) == (4, b"1\n")
        fed = await sdk.run(job_id, ["wc", "-c"], stdin=b"x" * 200_000)
        assert (fed.exit_code, fed.stdout.strip()) == (0, b"200000")

    made = await corral(stack, "token", "create", "no-exec", "--scope", "submit", "--json")
    without_exec = json.loads(made.stdout)["token"]
    refused = await corral(stack, "exec", job_id, "-T", "--", "true", token=without_exec)
    assert refused.returncode == 4, refused.stderr
    assert refused.stderr.startswith(b"corral exec: 403: "), refused.stderr

    # An admin turns interactive access off for the job's virtual cluster, then on again.
    default_vc = json.loads((await corral(stack, "vc", "show", "default", "--json")).stdout)
    same_quota = [f"--quota={gpu_type}={gpus}" for gpu_type, gpus in default_vc["quota"].items()]
    switched = await corral(stack, "vc", "set", "default", *same_quota, "--no-interactive", "--json")
    assert json.loads(switched.stdout)["interactive"] is False, switched.stderr
    off = await corral(stack, "exec", job_id, "-T", "--", "true")
    assert off.returncode == 4, off.stderr
    assert b"interactive" in off.stderr, off.stderr
    await corral(stack, "vc", "set", "default", *same_quota, "--interactive")
    assert (await corral(stack, "exec", job_id, "-T", "--", "true")).returncode == 0

    nowhere = await corral(stack, "exec", job_id, "--task", "main-7", "-T", "--", "true")
    assert nowhere.returncode == 1
    assert b"main-0" in nowhere.stderr, "the refusal lists the job's tasks"

    # A session open when the task ends is ended with it, and the CLI says why.
    waiting = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "corral",
        "exec",
        job_id,
        "-T",
        "--",
        "sh",
        "-c",
        "echo waiting; sleep 60",
        env=_env(stack),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert waiting.stdout is not None
    assert await asyncio.wait_for(waiting.stdout.readline(), 30) == b"waiting\n"
    async with stack.client() as http:
        await http.post(f"/api/v1/jobs/{job_id}/cancel")
        _, said = await asyncio.wait_for(waiting.communicate(), 30)
        # Either the command's own end (the task's stop signal reached it first: 128 +
        # SIGTERM, as a shell reports it) or the session's, said on standard error.
        if waiting.returncode != 128 + signal.SIGTERM:
            assert waiting.returncode == 1, said
            assert said.startswith(b"corral exec: "), said
        await wait_state(http, job_id, {"CANCELLED"})
    ended = await corral(stack, "exec", job_id, "-T", "--", "true")
    assert ended.returncode == 1
    assert b"409" in ended.stderr, ended.stderr
    assert b"cancelled" in ended.stderr.lower(), "the refusal says the job's state"


class Terminal:
    """The master side of a PTY the CLI runs on, as a terminal emulator holds it."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.seen = b""

    def resize(self, cols: int, rows: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def wait_for(self, pattern: bytes, timeout_s: float = 15.0) -> re.Match[bytes]:
        deadline = time.monotonic() + timeout_s
        while (found := re.search(pattern, self.seen)) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"{pattern!r} never showed; the terminal shows {self.seen[-500:]!r}"
            if select.select([self.master], [], [], min(left, 0.2))[0]:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # the CLI closed its side
                    time.sleep(0.05)
        self.seen = self.seen[found.end() :]
        return found

    def close(self) -> None:
        os.close(self.master)
        os.close(self.slave)


def _on_terminal(stack: Stack, terminal: Terminal, job_id: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "corral", "exec", job_id],
        env=_env(stack),
        stdin=terminal.slave,
        stdout=terminal.slave,
        stderr=terminal.slave,
    )


async def test_exec_on_a_terminal_is_a_remote_shell_that_follows_the_window(stack: Stack) -> None:
    job_id = await running_server(stack)
    terminal = Terminal()
    terminal.resize(100, 30)
    before = termios.tcgetattr(terminal.slave)
    process = _on_terminal(stack, terminal, job_id)
    try:
        # The remote shell computes, so what shows is its answer, not a local echo.
        terminal.type("echo sum=$((6 * 7))\r")
        await asyncio.to_thread(terminal.wait_for, rb"sum=42")
        terminal.type("stty size\r")
        await asyncio.to_thread(terminal.wait_for, rb"30 100")

        terminal.resize(120, 40)
        process.send_signal(signal.SIGWINCH)  # what the kernel sends a terminal's foreground
        await asyncio.sleep(0.5)
        terminal.type("stty size\r")
        await asyncio.to_thread(terminal.wait_for, rb"40 120")

        terminal.type("exit 5\r")
        code = await asyncio.to_thread(process.wait, 20)
        assert code == 5
        assert termios.tcgetattr(terminal.slave) == before, "the terminal is left as it was"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        terminal.close()


async def test_port_forward_reaches_the_tasks_labelled_port(stack: Stack) -> None:
    job_id = await running_server(stack)
    wrong = await corral(stack, "port-forward", job_id, ":web")
    assert wrong.returncode == 1
    said = f"corral port-forward: task main-0 of job {job_id} has no port labelled 'web'; its labels: http\n"
    assert wrong.stderr.decode() == said, "one line, no traceback"

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "corral",
        "port-forward",
        job_id,
        ":http",
        env={**_env(stack), "PYTHONFAULTHANDLER": "1"},  # SIGABRT prints where it is stuck
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        found = re.fullmatch(r"Forwarding 127\.0\.0\.1:(\d+) -> main-0:http\n", line)
        assert found, line
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{found[1]}", timeout=20) as local:
            for _ in range(3):  # a session per connection, one after another
                page = await local.get("/", headers={"Connection": "close"})
                assert page.status_code == 200
                assert "Directory listing for /" in page.text
        # A client that half-closes after its request still gets the whole answer.
        reader, writer = await asyncio.open_connection("127.0.0.1", int(found[1]))
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        writer.write_eof()
        answer = await asyncio.wait_for(reader.read(), 20)
        writer.close()
        assert answer.startswith(b"HTTP/1.0 200"), answer[:200]
        assert answer.rstrip().endswith(b"</html>"), answer[-200:]
    finally:
        process.send_signal(signal.SIGINT)
        code = await _ended_within(process, 20)
    assert code == 130


async def _ended_within(process: asyncio.subprocess.Process, seconds: float) -> int:
    """Its exit code; if it is still running after ``seconds``, a failure that says where
    (its threads' stacks, printed by the fault handler on SIGABRT)."""
    try:
        return await asyncio.wait_for(process.wait(), seconds)
    except TimeoutError:
        process.send_signal(signal.SIGABRT)
        await process.wait()
        assert process.stderr is not None
        stuck = (await process.stderr.read()).decode(errors="replace")
        raise AssertionError(f"still running {seconds:g} s after Ctrl-C:\n{stuck}") from None


async def test_a_notebook_answers_through_the_proxy_and_a_missing_app_is_said(stack: Stack) -> None:
    started = await corral(stack, "notebook", "start", "--gpus", "1", "--idle-timeout", "600")
    assert started.returncode == 0, started.stderr
    url = started.stdout.decode().strip()
    found = re.fullmatch(
        re.escape(stack.base_url) + r"/proxy/(job-[0-9a-z]+)/notebook-0/jupyter/lab\?token=([\w-]+)", url
    )
    assert found, url
    job_id = found[1]
    async with stack.client() as http:
        page = await http.get(url)  # the proxy takes the bearer token; the stand-in checks Jupyter's
        assert (page.status_code, page.text) == (200, "stand-in JupyterLab")
        assert (await http.get(url.replace(found[2], "wrong"))).status_code == 403

    listed = await corral(stack, "notebook", "list")
    assert job_id in listed.stdout.decode()
    assert url in listed.stdout.decode()
    stopped = await corral(stack, "notebook", "stop", job_id)
    assert stopped.returncode == 0, stopped.stderr

    board = await corral(stack, "tensorboard", job_id, "--timeout", "30")
    assert board.returncode == 1
    said = board.stderr.decode()
    assert re.search(r"^corral tensorboard: job-\w+ ended FAILED: ", said, re.MULTILINE), said
    assert "Traceback" not in said
    assert "exited with code 127" in said, said
    assert "tensorboard is not installed where this task runs" in said
    assert "pip install 'corral[notebook]'" in said
