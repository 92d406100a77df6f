"""The small pieces of ``make up``'s supervision, each with real processes and files: how
an exit is told, the restart delays, the cleanup after a server's crash, and the state
file the API's services view reads."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from corral.local.stack_config import StackConfig
from corral.local.supervised import ManagedService, describe_exit, group_members, kill_process_group
from corral.local.supervisor import Supervisor
from corral.local.supervisor_state import write_state
from services.api.cluster.routes_services import supervised_processes


def test_an_exit_is_told_by_its_code_or_the_signal_that_killed_it() -> None:
    killed = subprocess.Popen(["sleep", "60"])
    killed.kill()
    assert describe_exit(killed.wait()) == "killed by signal 9"
    assert describe_exit(subprocess.run(["sh", "-c", "exit 3"], check=False).returncode) == "exit 3"


def test_restarts_back_off_to_10_s_and_are_quick_again_after_a_steady_minute(tmp_path: Path) -> None:
    service = ManagedService("s", "service", tmp_path / "s.log", tmp_path / "s.pid")
    service.started_at = time.monotonic()
    delays = [service.exited("exit 1") for _ in range(7)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert service.crash_looping()
    assert service.state == "crash-loop"

    service.restarted()
    service.started_at = time.monotonic() - 61  # it then stayed up over a minute
    assert service.exited("killed by signal 9") == 0.5
    assert service.restarts == 1
    assert service.last_exit == "killed by signal 9"


def test_what_a_dead_servers_crash_left_in_its_group_is_killed() -> None:
    # A postmaster's backends outlive it in its process group, holding its shared memory.
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    deadline = time.monotonic() + 5
    while len(group_members(leader.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(group_members(leader.pid)) == 3
    leader.kill()
    leader.wait()
    assert len(group_members(leader.pid)) == 2, "the leader's children live on"

    kill_process_group(leader.pid)
    assert group_members(leader.pid) == []


def test_the_services_view_reads_what_the_supervisor_wrote(tmp_path: Path) -> None:
    state = tmp_path / "run" / "supervisor.json"
    service = ManagedService("api", "service", tmp_path / "api.log", tmp_path / "api.pid")
    service.started_at = time.monotonic()
    service.exited("killed by signal 9")
    write_state(state, [service.view()])

    [shown] = supervised_processes(state)
    assert (shown.name, shown.kind, shown.state, shown.pid) == ("api", "service", "restarting", None)
    assert shown.last_exit == "killed by signal 9"
    assert shown.last_exit_at is not None
    assert shown.log == str(tmp_path / "api.log")
    assert [p.name for p in tmp_path.joinpath("run").iterdir()] == ["supervisor.json"], "no temporary left"


def test_no_supervisor_means_an_empty_list(tmp_path: Path) -> None:
    assert supervised_processes(None) == []  # Kubernetes: no state file configured
    assert supervised_processes(tmp_path / "missing.json") == []
    (tmp_path / "torn.json").write_text('{"processes": [{"name"')
    assert supervised_processes(tmp_path / "torn.json") == []


def test_each_launcher_process_is_told_its_index_among_them(tmp_path: Path) -> None:
    """``CORRAL_LAUNCHER_PROCESSES=3``: launcher, launcher-2, launcher-3, told 0, 1 and 2
    of 3 (services/launcher/shards.py); the API's copies and a node's services are not."""
    config = StackConfig(home=tmp_path, launcher_processes=3, api_processes=2, simulated_nodes=2)
    supervisor = Supervisor(config)
    planned = supervisor.planned()
    launchers = [(name, copy) for name, service, _, _, copy in planned if service == "launcher"]
    assert launchers == [("launcher", 0), ("launcher-2", 1), ("launcher-3", 2)]
    assert [name for name, service, *_ in planned if service == "api"] == ["api", "api-2"]
    for name, service, _, node, copy in planned:
        env = supervisor.service_env(service, "postgresql://db", "nats://bus", 1, node, copy)
        if service == "launcher":
            assert env["CORRAL_LAUNCHER_PROCESSES"] == "3"
            assert env["CORRAL_LAUNCHER_PROCESS_INDEX"] == str(launchers.index((name, copy)))
        else:
            assert "CORRAL_LAUNCHER_PROCESS_INDEX" not in env, name
