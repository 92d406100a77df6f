"""The escape suite: an ordinary user's job tries to reach what it must not, and fails.

Every attempt runs as a real task on a real stack (``make up``'s supervisor, its
agent as root, so every task is sandboxed). The hostile command prints what it got;
the tests assert on the secrets themselves, so an attempt that "worked" cannot pass
by printing something else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from corral.local.ports import free_port
from corral.local.supervisor import readable_for_jobs
from services.launcher.agent.sandbox.cgroups import STARTING_GRACE_S
from tests.e2e.stack import HOLD, Stack, corral, submit_spec, wait_state
from tests.infra import world_readable_tempdir
from tests.launcher.sandboxes import DYNAMIC_UIDS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs a root agent")


# What a task's private /dev holds (a task given GPUs also gets their device nodes).
STANDARD_DEV = (
    "fd",
    "full",
    "null",
    "ptmx",
    "pts",
    "random",
    "shm",
    "stderr",
    "stdin",
    "stdout",
    "tty",
    "urandom",
    "zero",
)


def _cgroups_of(attempt_id: str) -> list[Path]:
    """The cgroup directories of an attempt left on this machine (v1 or v2 layout)."""
    root = Path("/sys/fs/cgroup")
    return [*root.glob(f"*/corral/*/{attempt_id}"), *root.glob(f"corral/*/{attempt_id}")]


def _tasks_holding_cores(but: set[str]) -> dict[str, str]:
    """Task cgroups on this machine (v1 cpuset) other than the attempts ``but`` that an
    agent counts as holding cores (``cgroups._may_hold_cores``): path -> cpuset."""
    held = {}
    now = time.time()
    for group in Path("/sys/fs/cgroup/cpuset/corral").glob("*/att-*"):
        with contextlib.suppress(OSError):
            young = now - group.stat().st_mtime < STARTING_GRACE_S
            if group.name not in but and (young or (group / "cgroup.procs").read_text().strip()):
                held[str(group)] = (group / "cpuset.cpus").read_text().strip()
    return held


def _spec(command: str, name: str = "probe", **resources: Any) -> dict[str, Any]:
    task = {"name": "main", "command": command, "resources": {"gpus": 0, **resources}}
    return {"name": name, "tasks": [task]}


async def _user(admin: httpx.AsyncClient, name: str) -> httpx.AsyncClient:
    """A user holding only the read and submit scopes, as most researchers do."""
    assert (await admin.post("/api/v1/users", json={"name": name})).status_code == 201
    body = {"name": f"{name}'s", "user": name, "scopes": ["read", "submit"]}
    created = await admin.post("/api/v1/tokens", json=body)
    assert created.status_code == 201, created.text
    token = created.json()["token"]
    return httpx.AsyncClient(
        base_url=admin.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


async def _logs(http: httpx.AsyncClient, job_id: str) -> str:
    return (await http.get(f"/api/v1/jobs/{job_id}/logs")).text


async def _running(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    job = await wait_state(http, job_id, {"RUNNING"})
    for _ in range(100):
        job = dict((await http.get(f"/api/v1/jobs/{job_id}")).json())
        if job["attempts"] and job["attempts"][0].get("state") == "RUNNING":
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(job)


def _task_processes(marker: str) -> list[str]:
    """Host processes whose command line holds ``marker`` (seen from outside every sandbox)."""
    found = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True, check=False)
    return [line for line in found.stdout.splitlines() if "pgrep" not in line]


def _every_command_line() -> str:
    """Every process's argv on this machine, as any user may read them."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return "\n".join(lines)


def _uid_claims() -> list[str]:
    """The dynamic uids claimed on this machine: "<node> <job>" each."""
    return [c.read_text() for c in Path("/run/corral/uids").glob("[0-9]*")]


def _state_dirs(node: str) -> list[Path]:
    """The node agents' state directories (pid and exit files) on this machine."""
    return list(Path("/dev/shm").glob(f"corral-*/{node}"))


def _first_pid_of_uid(uid: int) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    return int(entry.name)
            except FileNotFoundError:
                continue
    raise AssertionError(f"no process of uid {uid}")


@pytest.fixture
def own_servers_home() -> Iterator[Path]:
    """A home for a stack that runs its own Postgres and NATS, as ``make up`` does."""
    path = world_readable_tempdir("corral-home-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_a_hostile_job_reaches_nothing_of_the_control_plane_or_other_tenants(
    own_servers_home: Path,
) -> None:
    servers = {"CORRAL_PG_PORT": str(free_port()), "CORRAL_NATS_PORT": str(free_port())}
    async with Stack(own_servers_home, servers).running() as stack:
        await _escape_attempts(stack)


async def _escape_attempts(stack: Stack) -> None:
    home = stack.home.resolve()
    admin_token = stack.token()
    pg_password = (home / "postgres" / "password").read_text().strip()
    # The node's own database credentials: its role's password and the node's secret.
    node_credentials = [home / "credentials" / "postgres-agent", home / "credentials" / "node-local.secret"]
    node_secrets = [path.read_text().strip() for path in node_credentials]
    state_dirs = _state_dirs("local")
    async with (
        stack.client() as admin,
        await _user(admin, "alice") as alice,
        await _user(admin, "bob") as bob,
    ):
        bob_secret = "bob-private-weights-7f3a"
        bob_job = await submit_spec(bob, _spec(f"echo {bob_secret} > secret.txt; echo {bob_secret}; {HOLD}"))
        bob_attempt = (await _running(bob, bob_job))["attempts"][0]
        bob_log = next((home / "logs" / bob_job).rglob("*.log"))
        bob_work = home / "work" / bob_job
        bob_uid = bob_work.stat().st_uid
        bob_pid = _first_pid_of_uid(bob_uid)
        bob_helper = int(next(d / f"{bob_attempt['id']}.pid" for d in _state_dirs("local")).read_text())
        assert bob_uid >= DYNAMIC_UIDS[0], "bob's task runs under a dynamic uid of its own"

        targets = {
            "admin-token": home / "admin-token",
            "pg-password": home / "postgres" / "password",
            "agent-db-password": node_credentials[0],
            "node-secret": node_credentials[1],
            "bob-log": bob_log,
            "bob-work": bob_work / "secret.txt",
        }
        reads = "".join(
            f"echo {n}: $(cat {shlex.quote(str(p))} 2>&1 | head -c 200); " for n, p in targets.items()
        )
        writes = "".join(
            f"(echo x > {shlex.quote(str(p))}) 2>/dev/null && echo wrote: {shlex.quote(str(p))}; "
            for p in [
                bob_log,
                bob_work / "planted",
                *(d / "planted.exit" for d in state_dirs),
                home / "logs" / "planted",
                Path("/etc/planted"),
                Path("/usr/local/bin/planted"),
            ]
        )
        command = (
            f"{reads}{writes}"
            f"kill -0 {bob_pid} 2>/dev/null && echo signalled bob; "
            f"kill -0 {bob_helper} 2>/dev/null && echo signalled bob-helper; "
            "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); "
            "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; "
            "echo processes: $(ls /proc | grep -c '^[0-9]'); "
            "echo env: $(env | cut -d= -f1 | sort | tr '\\n' ' '); "
            "su -c id root </dev/null 2>&1 | head -1; "
            "echo done"
        )
        probe = await submit_spec(alice, _spec(command))
        job = await wait_state(alice, probe, {"SUCCEEDED", "FAILED"})
        said = await _logs(alice, probe)
        assert job["state"] == "SUCCEEDED", (job, said)
        assert said.rstrip().endswith("done"), said

        for secret in (admin_token, pg_password, bob_secret, *node_secrets):
            assert secret not in said, f"a secret leaked into alice's output:\n{said}"
        command_lines = _every_command_line()
        for secret in (admin_token, pg_password, *node_secrets):
            assert secret not in command_lines, (
                "a secret in a command line: /proc/*/cmdline is world-readable"
            )
        assert "wrote:" not in said, said
        assert "signalled" not in said, said
        uid = int(re.search(r"uid=(\d+)", said).group(1))  # type: ignore[union-attr]
        assert DYNAMIC_UIDS[0] <= uid <= DYNAMIC_UIDS[1], said
        assert uid != bob_uid, "two tenants' tasks share a uid"
        assert f"gid={uid} groups={uid}\n" in said, "no supplementary groups, not root's group"
        assert "CapEff:\t0000000000000000" in said
        assert "CapBnd:\t0000000000000000" in said
        assert "NoNewPrivs:\t1" in said
        # Its own shell, the command substitution, ls and grep: its pid namespace only.
        assert int(re.search(r"processes: (\d+)", said).group(1)) < 10, said  # type: ignore[union-attr]
        names = set(re.search(r"env: (.*)", said).group(1).split())  # type: ignore[union-attr]
        assert not {n for n in names if n.startswith(("CORRAL_DATABASE", "CORRAL_NATS", "CORRAL_API"))}, names
        assert "PGPASSWORD" not in names
        # bob's task ran on, untouched; his files are as he left them.
        assert (await bob.get(f"/api/v1/jobs/{bob_job}")).json()["state"] == "RUNNING"
        assert not (bob_work / "planted").exists()
        stack.release(bob_job)
        bob_done = await wait_state(bob, bob_job, {"SUCCEEDED", "FAILED"})
        assert bob_done["state"] == "SUCCEEDED", bob_done
        assert bob_secret in await _logs(bob, bob_job)


async def test_limits_hold_memory_processes_and_cores(
    database_url: str, nats_url: str, tmp_path: Path
) -> None:
    env = {"CORRAL_DATABASE_URL": database_url, "CORRAL_NATS_URL": nats_url, "CORRAL_AGENT_PIDS_MAX": "64"}
    greedy = "import time; b = bytearray(256 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1)"
    forks = (
        "import os, time\nn = 0\nfor _ in range(300):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
        "    n += 1\nprint('forked', n)\n"
    )
    async with Stack(tmp_path / "home", env).running() as stack, stack.client() as http:
        oom = await submit_spec(http, _spec(f"python3 -c {shlex.quote(greedy)}", memory_mb=64))
        bomb = await submit_spec(http, _spec(f"python3 -c {shlex.quote(forks)}"))
        failed = await wait_state(http, oom, {"SUCCEEDED", "FAILED"})
        assert failed["state"] == "FAILED", failed
        attempt = failed["attempts"][0]
        assert attempt["reason"] == "exceeded its 64 MiB memory limit", attempt
        assert failed["reason"].endswith(": exceeded its 64 MiB memory limit (permanent)"), failed["reason"]
        assert attempt["classification"] == "permanent"
        assert not _cgroups_of(attempt["id"]), "its cores were still held when its end was recorded"

        bombed = await wait_state(http, bomb, {"SUCCEEDED", "FAILED"})
        forked = int(re.search(r"forked (\d+)", await _logs(http, bomb)).group(1))  # type: ignore[union-attr]
        assert bombed["state"] == "SUCCEEDED"
        assert 0 < forked < 64, forked
        assert not _task_processes("time.sleep(60)"), "its children outlived the task"
        assert not _cgroups_of(bombed["attempts"][0]["id"])

        # Submitted once the others have ended: both cores are free for them.
        pinned = [
            await submit_spec(
                http,
                _spec(
                    "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status; echo omp=$OMP_NUM_THREADS; "
                    + HOLD,
                    name=f"pinned-{i}",
                    cpus=1,
                ),
            )
            for i in range(2)
        ]

        cores, attempts = [], set()
        for job_id in pinned:
            running = await _running(http, job_id)
            attempts.add(running["attempts"][0]["id"])
            assert _cgroups_of(running["attempts"][0]["id"]), "a running task's cgroup is where we look"
            for _ in range(50):
                said = await _logs(http, job_id)
                if "omp=" in said:
                    break
                await asyncio.sleep(0.1)
            cpus = re.search(r"Cpus_allowed_list:\s*(\S+)", said).group(1)  # type: ignore[union-attr]
            mems = re.search(r"Mems_allowed_list:\s*(\S+)", said).group(1)  # type: ignore[union-attr]
            assert re.fullmatch(r"\d+", cpus), f"a 1-CPU task may run on {cpus}"
            assert mems == "0"
            assert "omp=1" in said
            cores.append(cpus)
        # Another core was free unless tasks of other stacks on this machine held them.
        elsewhere = _tasks_holding_cores(but=attempts)
        if len(os.sched_getaffinity(0)) >= 2 and not elsewhere:
            assert cores[0] != cores[1], "two 1-CPU tasks were given the same core while another was free"
        for job_id in pinned:
            stack.release(job_id)
            assert (await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}))["state"] == "SUCCEEDED"


async def test_every_process_of_a_task_goes_with_it(stack: Stack) -> None:
    """A daemonised grandchild (new session, reparented) dies when its task ends, and
    when its task is cancelled."""
    async with stack.client() as http:
        ended = await submit_spec(http, _spec("setsid sh -c 'sleep 4321' & sleep 0.2; echo left it"))
        assert (await wait_state(http, ended, {"SUCCEEDED", "FAILED"}))["state"] == "SUCCEEDED"
        await asyncio.sleep(0.3)
        assert not _task_processes("sleep 4321")

        cancelled = await submit_spec(http, _spec(f"setsid sh -c 'sleep 4322' & {HOLD}"))
        await _running(http, cancelled)
        for _ in range(50):
            if _task_processes("sleep 4322"):
                break
            await asyncio.sleep(0.1)
        assert _task_processes("sleep 4322")
        assert (await http.post(f"/api/v1/jobs/{cancelled}/cancel")).status_code in (200, 202)
        await wait_state(http, cancelled, {"CANCELLED", "FAILED"})
        await asyncio.sleep(0.3)
        assert not _task_processes("sleep 4322")
        # Their uids went back to the pool with their last processes.
        claims = _uid_claims()
        assert not [c for c in claims if ended in c or cancelled in c], claims


async def test_only_its_own_files_and_descriptors(stack: Stack) -> None:
    command = (
        'python3 -c \'import os; print("fds:", *sorted(os.listdir(f"/proc/{os.getppid()}/fd")))\'; '
        "echo home=$HOME pwd=$(pwd) shm=$(ls -A /dev/shm | wc -l); echo tmp: $(ls -A /tmp); "
        "echo dev: $(ls /dev | tr '\\n' ' '); "
        "touch /tmp/mine mine && echo wrote-own; "
        "echo out=$(readlink /proc/self/fd/1 | cut -d: -f1); "
        "ls -A $(dirname $(pwd)) | tr '\\n' ' '"
    )
    async with stack.client() as http:
        job_id = await submit_spec(http, _spec(command))
        job = await wait_state(http, job_id, {"SUCCEEDED", "FAILED"})
        said = await _logs(http, job_id)
    assert job["state"] == "SUCCEEDED", (job, said)
    assert "fds: 0 1 2\n" in said, said  # its shell's, as its child sees them
    work = stack.home.resolve() / "work" / job_id
    # /tmp is its own, empty but for the way to its working directory when that lies under /tmp.
    assert f"home={work} pwd={work} shm=0" in said, said
    # /tmp is its own: nothing in it but the ways to what is bound into the sandbox (its
    # working directory, and the Python and checkout make up lets jobs read) where those
    # lie under /tmp.
    bound = [work, *readable_for_jobs()]
    ways = {path.parts[2] for path in bound if len(path.parts) > 2 and path.parts[1] == "tmp"}
    in_tmp = set(said.split("tmp:")[1].split("\n")[0].split())
    assert in_tmp <= ways, (in_tmp, ways)
    devices = said.split("dev: ")[1].split("\n")[0].split()
    assert set(devices) == set(STANDARD_DEV), devices
    assert "wrote-own" in said
    assert "out=pipe\n" in said, "its output goes through a pipe: it holds no log file to reopen"
    assert said.strip().endswith(job_id), "its job's directory is the only one it sees"
    assert (work / "mine").exists()


async def test_the_node_says_how_it_isolates_its_tasks(stack: Stack) -> None:
    async with stack.client() as http:
        await stack.wait_nodes_ready(1)
        [node] = (await http.get("/api/v1/nodes")).json()["items"]
    assert node["isolation"] == "sandbox"
    assert "a dynamic uid of its own ({}-{})".format(*DYNAMIC_UIDS) in node["isolation_detail"]
    # Simulated GPUs advertise no CPU limit: the node says its tasks share this machine's cores.
    cores = len(os.sched_getaffinity(0))
    assert f"no CPU limit on a machine of {cores} cores" in node["cpu_sharing"]


async def test_an_agent_that_cannot_isolate_refuses_unless_allowed(
    database_url: str, nats_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-helper"
    env = {
        "CORRAL_DATABASE_URL": database_url,
        "CORRAL_NATS_URL": nats_url,
        "CORRAL_AGENT_SANDBOX_HELPER": str(missing),
    }
    async with Stack(tmp_path / "refusing", env).running() as stack:
        for _ in range(100):
            if "refusing tasks" in stack.logs("agent"):
                break
            await asyncio.sleep(0.1)
        said = stack.logs("agent")
        assert f"CORRAL_AGENT_SANDBOX_HELPER={missing} is not an executable file" in said, said
        assert "refusing tasks" in said
        assert "CORRAL_AGENT_ALLOW_UNISOLATED=true" in said  # the way out, said with the cause
        with pytest.raises(AssertionError):
            await stack.wait_nodes_ready(1, timeout_s=2)  # no agent holds the node: nothing runs there

    allowed = {**env, "CORRAL_AGENT_ALLOW_UNISOLATED": "true"}
    async with Stack(tmp_path / "allowed", allowed).running() as stack, stack.client() as http:
        await stack.wait_nodes_ready(1)
        [node] = (await http.get("/api/v1/nodes")).json()["items"]
        assert node["isolation"] == "none"
        assert str(missing) in node["isolation_detail"]
        listed = corral(stack, "nodes")
        assert listed.returncode == 0, listed.stderr
        assert "ISOLATION" in listed.stdout
        assert " none " in listed.stdout
        job_id = await submit_spec(http, _spec("id -u"))
        assert (await wait_state(http, job_id, {"SUCCEEDED", "FAILED"}))["state"] == "SUCCEEDED"
        assert await _logs(http, job_id) == f"{os.geteuid()}\n"  # as the agent's own user: said, not hidden
