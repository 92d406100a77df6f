"""Task cgroups: v1 for real on this machine (root), v2 against a fake cgroupfs tree."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.launcher.agent.processes import spawn_sandboxed
from services.launcher.agent.sandbox.cgroups import (
    CgroupProblem,
    CgroupV1,
    CgroupV2,
    Limits,
    cgroup_mounts,
)
from services.launcher.agent.sandbox.sandbox import (
    Sandbox,
    SandboxConfig,
    SandboxProblem,
    needed_mounts,
    open_sandbox,
)
from tests.launcher.sandbox_trees import cgroup_v2_group, cgroup_v2_root
from tests.launcher.sandboxes import DYNAMIC_UIDS, prepare_task, sandbox_for_tests

LIMITS = Limits(
    memory_bytes=256 * 2**20, cpus=1.5, cpuset_cpus="2-3", cpuset_mems="1", pids_max=64, devices=("c 195:0",)
)
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="real cgroups and namespaces need root")


def test_v2_enables_the_controllers_and_writes_each_limit(tmp_path: Path) -> None:
    root = cgroup_v2_root(tmp_path / "cgroup")
    for made_by_the_kernel in (root / "corral", root / "corral" / "node-a"):
        cgroup_v2_group(made_by_the_kernel)
    tree = CgroupV2(root, "node-a")
    enabled = "+cpuset +cpu +memory +pids"
    for parent in (root, root / "corral", root / "corral" / "node-a"):
        assert (parent / "cgroup.subtree_control").read_text() == enabled
    group = cgroup_v2_group(root / "corral" / "node-a" / "att-1")
    cgroup = tree.create("att-1", LIMITS)
    assert (group / "memory.max").read_text() == str(256 * 2**20)
    assert (group / "memory.swap.max").read_text() == "0"
    assert (group / "cpu.max").read_text() == "150000 100000"
    assert (group / "cpuset.cpus").read_text() == "2-3"
    assert (group / "cpuset.mems").read_text() == "1"
    assert (group / "pids.max").read_text() == "64"
    assert cgroup.procs_files == [group / "cgroup.procs"]
    cgroup.kill()
    assert (group / "cgroup.kill").read_text() == "1"
    assert cgroup.oom_kills() == 0
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cgroup.oom_kills() == 1
    assert tree.names() == ["att-1"]
    assert tree.busy_cpus() == {2: 1, 3: 1}


def test_other_nodes_cores_count_while_their_tasks_may_be_in_them(tmp_path: Path) -> None:
    """A task cgroup of another node counts while it holds a process or is new (its task
    on its way in); the empty ones a killed agent left behind hold no core."""
    root = cgroup_v2_root(tmp_path / "cgroup")
    for made_by_the_kernel in (root / "corral", root / "corral" / "node-a"):
        cgroup_v2_group(made_by_the_kernel)
    tree = CgroupV2(root, "node-a")
    for task, cpus, procs, age_s in (
        ("running", "0", "4242\n", 3600),
        ("starting", "1", "", 1),
        ("left-behind", "2", "", 3600),
        ("also-left", "2", "", 3600),
    ):
        group = root / "corral" / "node-b" / task
        group.mkdir(parents=True)
        (group / "cpuset.cpus").write_text(cpus)
        (group / "cgroup.procs").write_text(procs)
        made = time.time() - age_s
        os.utime(group, (made, made))
    assert tree.busy_cpus() == {0: 1, 1: 1}


def test_v2_without_delegated_controllers_says_which_file_and_what_to_do(tmp_path: Path) -> None:
    root = cgroup_v2_root(tmp_path / "cgroup", controllers="cpu io")
    with pytest.raises(CgroupProblem) as caught:
        CgroupV2(root, "node-a")
    said = str(caught.value)
    assert str(root / "cgroup.controllers") in said
    assert "cpuset, memory, pids" in said
    assert "Delegate=yes" in said


def test_v1_missing_controllers_are_named(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n"
    )
    v2_root, v1 = cgroup_mounts(mounts)
    assert v2_root is None
    with pytest.raises(CgroupProblem, match="cpuset, pids, devices, freezer are not mounted"):
        CgroupV1(v1, "node-a")


# --- for real: cgroup v1 on this machine, through the sandbox helper ---------------------


@pytest.fixture
def fake_gpus() -> Iterator[Path]:
    """Character devices numbered like NVIDIA's (major 195) with no driver behind them,
    as Slurm's own tests check ConstrainDevices without a GPU: opening one the device
    cgroup allows fails with ENXIO (no such device), one it denies with EPERM. Not under
    /tmp, which a task sees as its own empty tmpfs."""
    directory = Path(tempfile.mkdtemp(prefix="corral-fake-gpus-", dir="/var/lib"))
    directory.chmod(0o755)
    for minor in range(2):
        os.mknod(directory / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(195, minor))
        (directory / f"nvidia{minor}").chmod(0o666)  # (mknod obeys the umask)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def sandbox(tmp_path: Path, fake_gpus: Path) -> Iterator[Sandbox]:
    if os.geteuid() != 0:
        pytest.skip("real cgroups and namespaces need root")
    opened = sandbox_for_tests(tmp_path, pids_max=32, device_root=fake_gpus)
    yield opened
    opened.close()


def _run(sandbox: Sandbox, tmp_path: Path, command: str, *, gpus: list[int]) -> str:
    """One task through the sandbox, as the agent starts it; its output."""
    task = prepare_task(sandbox, tmp_path, command, gpus=gpus)
    helper = spawn_sandboxed(task.launch.argv, {"PATH": "/usr/bin:/bin", **task.launch.env})
    assert helper.wait(60) == 0, task.log.read_text()
    assert sandbox.finish(task.attempt_id, task.job_id)
    return task.log.read_text()


@root_only
def test_the_device_cgroup_opens_the_tasks_gpu_and_denies_the_other(
    sandbox: Sandbox, tmp_path: Path, fake_gpus: Path
) -> None:
    probe = (
        "import errno, os\n"
        "for n in (0, 1):\n"
        "    try:\n"
        f"        os.open('{fake_gpus}/nvidia%d' % n, os.O_RDWR)\n"
        "    except OSError as e:\n"
        "        print(n, errno.errorcode[e.errno])\n"
    )
    said = _run(
        sandbox, tmp_path, f'python3 -c "{probe}"; echo cuda=$CUDA_VISIBLE_DEVICES; ls /dev', gpus=[0]
    )
    assert "0 ENXIO" in said, said  # allowed: the open reaches the (absent) driver
    assert "1 EPERM" in said, said  # denied by the device cgroup
    assert "cuda=0" in said  # no driver to give UUIDs: the index
    assert "nvidia" not in said.split("cuda=0")[1]  # outside /dev: seen where it is, not in /dev


@root_only
def test_a_task_given_no_gpu_opens_none(sandbox: Sandbox, tmp_path: Path, fake_gpus: Path) -> None:
    said = _run(
        sandbox, tmp_path, f"cat {fake_gpus}/nvidia0 2>&1; echo cuda=[$CUDA_VISIBLE_DEVICES]", gpus=[]
    )
    assert "Operation not permitted" in said, said
    assert "cuda=[]" in said


@root_only
def test_cpus_and_memory_nodes_match_the_placement(sandbox: Sandbox, tmp_path: Path) -> None:
    said = _run(
        sandbox, tmp_path, "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status; echo $CORRAL_CPUS", gpus=[]
    )
    lines = dict(line.split(":\t") for line in said.splitlines() if ":\t" in line)
    given = said.strip().splitlines()[-1]
    assert lines["Cpus_allowed_list"] == given
    assert given.isdigit(), "one core for a 1-CPU task"
    assert lines["Mems_allowed_list"] == "0"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@root_only
def test_a_cgroup_kill_reaches_a_daemonised_grandchild(sandbox: Sandbox, tmp_path: Path) -> None:
    task = prepare_task(sandbox, tmp_path, "setsid sh -c 'sleep 5678' & sleep 600", memory_mb=64)
    launch = task.launch
    helper = spawn_sandboxed(launch.argv, {"PATH": "/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 10
        daemon: list[int] = []
        while not daemon and time.monotonic() < deadline:
            time.sleep(0.05)
            daemon = [
                p
                for p in launch.cgroup.processes()
                if _cmdline(p) == b"sleep\x005678\x00" and os.getsid(p) != os.getsid(helper.pid)
            ]
        assert daemon, "a grandchild in a session of its own, outside the task's process group"
        members = launch.cgroup.processes()
        launch.cgroup.kill()
        assert helper.wait(10) == 128 + signal.SIGKILL
        assert task.files.exit_file.read_text() == "-9\n"
        assert sandbox.finish(task.attempt_id, task.job_id)
        assert not any(Path(f"/proc/{p}").exists() for p in members)
    finally:
        helper.kill()


def test_only_the_mounts_a_task_needs(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "python").mkdir()
    open_dir = Path("/usr/share")
    home = Path("/srv/corral-home")
    hidden, readable = needed_mounts(
        [home, home / "logs", Path("/dev/shm/corral-1/local"), Path("/root"), Path("/tmp/x")],
        [Path("/root/.pyenv"), private / "python", open_dir, Path("/tmp")],
    )
    assert hidden == (home, Path("/root"))  # its logs are inside it; /dev and /tmp are new anyway
    # Not /usr/share: anyone reaches it. /tmp's content: only as the task's new /tmp would.
    assert readable == (Path("/root/.pyenv"), private / "python", Path("/tmp"))


def test_a_non_root_agent_is_told_it_cannot_sandbox(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # a laptop's agent (the test itself runs as root)
    config = SandboxConfig(
        node_id="laptop",
        hidden=(),
        claims_dir=tmp_path,
        uid_range=DYNAMIC_UIDS,
        run_as="dynamic",
        pids_max=64,
    )
    with pytest.raises(SandboxProblem, match="runs as uid 1000, not root: it cannot give tasks uids"):
        open_sandbox(config)
