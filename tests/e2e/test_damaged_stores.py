"""A store its server refuses stops `make up` with a message that names it and says what to
do; nothing ever makes a fresh empty store in its place. And a process that keeps dying
is reported as a crash loop, once, while the supervisor keeps trying."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.local.ports import free_port
from corral.local.postgres import LocalPostgres
from corral.local.problems import StartupProblem
from corral.local.stack_config import StackConfig
from corral.local.stack_nats import StackNats
from corral.local.supervised import ManagedServer, ManagedService
from corral.local.supervisor import Supervisor
from shared.bus.nats import NatsBus
from tests.infra import world_readable_tempdir


@pytest.fixture
def home() -> Iterator[Path]:
    path = world_readable_tempdir("corral-damaged-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_postgres_data_directory_it_cannot_recover_is_named_and_kept(home: Path) -> None:
    server = LocalPostgres(home / "postgres", free_port())
    server.start(log_file=home / "postgres.log")
    server.stop()
    control = server.data_dir / "global" / "pg_control"
    control.write_bytes(b"\0" * 100)  # its control file, cut and zeroed

    with pytest.raises(StartupProblem) as refused:
        server.start(log_file=home / "postgres.log")
    said = str(refused.value)
    assert str(server.data_dir) in said
    assert "FATAL" in said or "PANIC" in said  # Postgres' own reason, repeated
    assert "backup" in refused.value.fix
    assert f"mv {server.data_dir} {server.data_dir}.damaged" in refused.value.fix
    assert control.read_bytes() == b"\0" * 100, "nothing was remade over it"


def test_make_up_refuses_a_data_directory_without_pg_version(home: Path) -> None:
    data = home / "postgres" / "data"
    data.mkdir(parents=True)
    (data / "base").mkdir()  # what is left of a cluster half copied
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")},
        "CORRAL_HOME": str(home),
        "CORRAL_PORT": str(free_port()),
        "CORRAL_PG_PORT": str(free_port()),
        "CORRAL_NATS_PORT": str(free_port()),
    }
    started = subprocess.run(
        [sys.executable, "-m", "corral", "up"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 1
    assert f"{data} holds files but no PG_VERSION" in started.stderr + started.stdout
    assert "fix: restore" in started.stderr + started.stdout
    assert sorted(p.name for p in data.iterdir()) == ["base"], "no initdb over it"


async def _make_streams(nats: StackNats) -> None:
    bus = await NatsBus.connect(nats.settings_for("admin"), name="test")
    try:
        await bus.js.publish("corral.job.submitted.v1", b"{}")
    finally:
        await bus.close()


def test_a_stream_nats_cannot_read_is_not_made_anew_over_it(home: Path) -> None:
    nats = StackNats(home, free_port(), "127.0.0.1", ["api"], ["local"])
    nats.start(home / "nats.log")
    asyncio.run(_make_streams(nats))
    nats.server.stop()
    stream = nats.store / "$G" / "streams" / "CORRAL_JOBS"
    (stream / "meta.inf").write_text("not what NATS wrote{")

    with pytest.raises(StartupProblem) as refused:
        nats.start(home / "nats.log")
    assert f"did not load the stream CORRAL_JOBS from {stream}" in refused.value.cause
    assert f"mv {nats.store} {nats.store}.damaged" in refused.value.fix
    assert "no job is lost" in refused.value.fix
    assert nats.server.process is not None
    assert nats.server.process.poll() is not None, "the server is stopped, not left half up"
    assert (stream / "meta.inf").read_text() == "not what NATS wrote{"


def test_a_jetstream_store_nats_refuses_stops_the_start_with_its_reason(home: Path) -> None:
    nats = StackNats(home, free_port(), "127.0.0.1", ["api"], ["local"])
    nats.store.parent.mkdir(parents=True)
    nats.store.write_text("a file where the store should be\n")
    with pytest.raises(StartupProblem) as refused:
        nats.start(home / "nats.log")
    assert str(nats.store) in refused.value.cause
    assert "FTL" in refused.value.cause  # nats-server's own reason, repeated
    assert nats.store.read_text() == "a file where the store should be\n"


def test_a_process_that_keeps_dying_is_reported_as_a_crash_loop_once(tmp_path: Path) -> None:
    """A service that exits at once, and a server that dies and then cannot start again
    (its store refused): both loop, each said once, and the supervisor carries on."""
    out = io.StringIO()
    supervisor = Supervisor(StackConfig(home=tmp_path), out=out)
    dying = ManagedService(
        "doomed", "service", tmp_path / "doomed.log", tmp_path / "doomed.pid", module="corral_no_such_module"
    )
    dying.env = dict(os.environ)
    dying.start()
    supervisor.processes.append(dying)

    first = subprocess.Popen(["sleep", "60"], start_new_session=True)

    def refuse() -> None:
        raise StartupProblem("NATS", "its store is damaged", "move it aside")

    server = ManagedServer(
        "broken-server",
        "server",
        tmp_path / "broken.log",
        tmp_path / "broken.pid",
        begin=refuse,
        process=lambda: first,
    )
    server.adopt()
    supervisor.servers.append(server)
    first.kill()

    deadline = time.monotonic() + 30
    while not (dying.crash_looping() and server.crash_looping()) and time.monotonic() < deadline:
        supervisor.supervise_once()
        time.sleep(0.05)
    for _ in range(20):  # a while longer: it is said once
        supervisor.supervise_once()
        time.sleep(0.05)
    assert dying.state == "crash-loop"
    assert server.state == "crash-loop"
    state = json.loads((tmp_path / "run" / "supervisor.json").read_text())
    shown = {p["name"]: p for p in state["processes"]}
    assert shown["broken-server"]["state"] == "crash-loop"
    assert shown["broken-server"]["last_exit"].startswith("could not start: ")
    supervisor.stop(grace_s=1)
    said = out.getvalue()
    assert said.count("doomed exited (exit 1); restarting in") >= 5
    assert said.count("doomed is crash-looping: 5 exits in 60 s, last exit 1; see ") == 1
    assert str(tmp_path / "doomed.log") in said
    assert "broken-server exited (killed by signal 9); restarting in 0.5s" in said
    assert "broken-server failed (could not start: its store is damaged); restarting in 1.0s" in said
    assert (
        said.count(
            f"broken-server is crash-looping: 5 exits in 60 s, last could not start: its store is damaged; "
            f"see {tmp_path / 'broken.log'}; fix: move it aside"
        )
        == 1
    )
