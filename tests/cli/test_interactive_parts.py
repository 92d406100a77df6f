"""The parts of ``corral exec``, ``port-forward``, ``notebook`` and ``tensorboard`` that need
no stack: the client's framing against the server's own (they are two copies of
Kubernetes' numbers, and must not drift apart), the command-line forms, and the job specs
and shell commands the notebook commands submit, run by a real shell."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from corral import cli
from corral.commands.errors import Refused, UsageProblem
from corral.commands.notebook_specs import (
    notebook_command,
    notebook_spec,
    tensorboard_command,
    tensorboard_spec,
)
from corral.commands.port_forward import Mapping, parse_mapping
from corral.commands.targets import check_label, check_running, target
from corral.sdk import channels
from corral.sdk.interactive import websocket_url
from corral.sdk.models import Job
from shared.interactive import protocol
from shared.jobs import JobSpec

STANDINS = Path(__file__).parent / "standins"
SOURCE_JOB = "job-" + "0" * 26


def test_the_client_frames_as_the_server_does() -> None:
    for channel in ("STDIN", "STDOUT", "STDERR", "STATUS", "RESIZE"):
        assert int(channels.Channel[channel]) == int(protocol.Channel[channel])
    assert channels.SUBPROTOCOL == protocol.KUBERNETES_SUBPROTOCOL
    assert channels.SUBPROTOCOLS == protocol.KUBERNETES_SUBPROTOCOLS
    assert (int(channels.DATA), int(channels.ERROR)) == (int(protocol.DATA), int(protocol.ERROR))
    assert channels.resize_payload(132, 43) == protocol.resize_payload(132, 43)
    for code in (0, 1, 3, 127, 255):
        assert channels.exit_code_of(protocol.exit_status(code)) == code
    assert channels.exit_code_of(protocol.exit_status(None, signal=9)) == 137
    assert channels.exit_code_of(b'{"status": "Failure", "message": "the task ended"}') is None
    assert channels.status_message(b'{"status": "Failure", "message": "the task ended"}') == "the task ended"
    assert channels.exit_code_of(b"not json") is None


def test_websocket_urls_follow_the_api_url() -> None:
    path = "/api/v1/sessions/ses_x/stream"
    assert websocket_url("http://127.0.0.1:8080", path) == f"ws://127.0.0.1:8080{path}"
    assert websocket_url("https://corral.example/base/", path) == f"wss://corral.example/base{path}"
    with pytest.raises(ValueError, match="not http"):
        websocket_url("ftp://corral.example", path)


def test_port_forward_mappings() -> None:
    assert parse_mapping("8888:jupyter") == Mapping(8888, "jupyter")
    assert parse_mapping(":http") == Mapping(0, "http")
    for wrong in ("http", "8888:", "x:http", "70000:http"):
        with pytest.raises(UsageProblem, match=r"LOCAL:LABEL|not a port number"):
            parse_mapping(wrong)


def _job(state: str = "RUNNING") -> Job:
    spec = {
        "name": "two",
        "tasks": [
            {"name": "main", "command": "true"},
            {"name": "worker", "instances": 2, "command": "true", "ports": {"http": 1, "debug": 1}},
        ],
    }
    now = "2026-11-27T00:00:00Z"
    return Job.model_validate(
        {
            "id": "job-x",
            "name": "two",
            "user": "alice",
            "virtual_cluster": "default",
            "state": state,
            "reason": "" if state == "RUNNING" else "waiting for 1 GPU",
            "created_at": now,
            "updated_at": now,
            "spec": spec,
        }
    )


def test_a_task_is_found_by_its_name_and_its_labels_checked() -> None:
    job = _job()
    assert target(job, None).name == "main-0"
    assert target(job, "worker-1").labels == ("http", "debug")
    with pytest.raises(Refused, match=r"no task 'worker-2'; its tasks: main-0, worker-0, worker-1"):
        target(job, "worker-2")
    with pytest.raises(Refused, match=r"no port labelled 'web'; its labels: http, debug"):
        check_label(job, target(job, "worker-0"), "web")
    with pytest.raises(Refused, match=r"no port labelled 'http'; its labels: none"):
        check_label(job, target(job, "main-0"), "http")
    with pytest.raises(Refused, match=r"job job-x is PENDING: waiting for 1 GPU; it must be RUNNING"):
        check_running(_job("PENDING"))


def test_the_app_jobs_are_valid_specs() -> None:
    notebook = JobSpec.model_validate(
        notebook_spec(gpus=2, virtual_cluster="vision", idle_timeout_s=3600, token="t0k", memory_mb=8192)
    )
    [role] = notebook.tasks
    assert (notebook.name, role.name, role.ports, role.proxy_prefix) == (
        "notebook",
        "notebook",
        {"jupyter": 1},
        "keep",
    )
    assert (role.resources.gpus, role.resources.memory_mb, role.env) == (2, 8192, {"JUPYTER_TOKEN": "t0k"})
    assert notebook.virtual_cluster == "vision"
    assert "t0k" not in role.command  # the token is read from the environment, never on a command line
    board = JobSpec.model_validate(tensorboard_spec(SOURCE_JOB, virtual_cluster=None))
    [role] = board.tasks
    assert (role.event_files_from, role.ports, role.proxy_prefix) == (SOURCE_JOB, {"tensorboard": 1}, "keep")


def _run_task_command(
    command: str, tmp_path: Path, path: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """The command as a task runs it (``/bin/sh -c``), with the variables the agent sets."""
    return subprocess.run(
        ["/bin/sh", "-c", command],
        env={"PATH": path, "HOME": str(tmp_path), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


def test_a_missing_program_ends_the_task_with_what_to_install(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    for command, program in ((notebook_command(0), "jupyter"), (tensorboard_command(), "tensorboard")):
        done = _run_task_command(command, tmp_path, f"{empty}:/usr/bin:/bin")
        assert done.returncode == 127
        assert f"{program} is not installed where this task runs" in done.stderr
        assert "pip install 'corral[notebook]'" in done.stderr


def test_tensorboard_is_given_its_prefix_without_the_trailing_slash(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "tensorboard"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    fake.chmod(0o755)
    done = _run_task_command(
        tensorboard_command(),
        tmp_path,
        f"{bin_dir}:/usr/bin:/bin",
        CORRAL_PORT_TENSORBOARD="6006",
        CORRAL_PROXY_PATH_TENSORBOARD="/proxy/job-x/tensorboard-0/tensorboard/",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:8] == [
        "--logdir",
        "events",
        "--host",
        "127.0.0.1",
        "--port",
        "6006",
        "--path_prefix",
        "/proxy/job-x/tensorboard-0/tensorboard",
    ]
    assert (tmp_path / "events").is_dir()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_notebook_command_starts_jupyter_on_its_port_and_prefix(tmp_path: Path) -> None:
    """With the test's stand-in ``jupyter`` (tests/cli/standins) in place of JupyterLab:
    the options reach it as the shell expanded them, and it answers under the prefix."""
    port = _free_port()
    prefix = "/proxy/job-x/notebook-0/jupyter/"
    env = {
        **os.environ,
        "PATH": f"{STANDINS}:/usr/bin:/bin",
        "CORRAL_PORT_JUPYTER": str(port),
        "CORRAL_PROXY_PATH_JUPYTER": prefix,
        "JUPYTER_TOKEN": "t0k",
    }
    process = subprocess.Popen(
        ["/bin/sh", "-c", notebook_command(1800)], env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}{prefix}lab", params={"token": "t0k"})
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the stand-in never listened"
                time.sleep(0.1)
        assert (answer.status_code, answer.text) == (200, "stand-in JupyterLab")
        assert httpx.get(f"http://127.0.0.1:{port}{prefix}lab", params={"token": "wrong"}).status_code == 403
    finally:
        process.terminate()
        printed, _ = process.communicate(timeout=10)
    assert f"'--port={port}'" in printed
    assert f"'--ServerApp.base_url={prefix}'" in printed
    assert "'--MappingKernelManager.cull_idle_timeout=1800'" in printed
    assert "'--ServerApp.shutdown_no_activity_timeout=1800'" in printed


def test_a_terminal_is_refused_when_standard_input_is_not_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("piped"))  # nothing is sent to any API
    code = cli.main(["--url", "http://127.0.0.1:9", "--token", "crl_x", "exec", "job-x", "-t", "--", "true"])
    assert code == 2
    assert capsys.readouterr().err == (
        "corral exec: --tty needs standard input to be a terminal; use -T for pipes\n"
    )


def test_port_forward_refuses_a_malformed_mapping_before_asking_anything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["--url", "http://127.0.0.1:9", "--token", "crl_x", "port-forward", "job-x", "8888"])
    assert code == 2
    assert "give LOCAL:LABEL, e.g. 8888:http" in capsys.readouterr().err
