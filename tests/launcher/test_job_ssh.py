"""A generic job's ``ssh`` with real processes, without the rest of the stack: the files
written as root for the task's uid, each task's wrapped command run by the agent's own
task wrapper as that uid (its sshd beside it), then ``ssh ROLE-INDEX`` from a task, the
barrier, and a user's key logging in.

Needs root (to run as another uid), sshd and ssh, and an unprivileged account with a
shell (an sshd session runs the user's shell); skipped otherwise."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from services.launcher.agent.environment import Peer, task_environment
from services.launcher.agent.job_ssh.texts import BARRIER_EXIT_CODE
from services.launcher.agent.job_ssh.wiring import TaskKeys, wire_job_task
from services.launcher.agent.mpi.wiring import sshd_binary
from services.launcher.agent.processes import wrapper_for
from services.launcher.agent.sandbox.identities import Identity
from services.launcher.exit_codes import TaskEnd, classify
from services.launcher.job_keys import new_key_pair
from shared.jobs import JobSpec
from tests.launcher.mpi_samples import login_account, reachable_dir

ACCOUNT = login_account()
SSH = shutil.which("ssh")
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or sshd_binary() is None or SSH is None or ACCOUNT is None,
    reason="needs root, sshd, ssh and an unprivileged account with a shell",
)
JOB_ID = "job-01jz000000000000000000ssh0"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def generic_spec(ssh: dict[str, Any], main_command: str = "true") -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "ssh-test",
            "tasks": [
                {"name": "main", "command": main_command},
                {"name": "worker", "instances": 2, "command": "sleep 60"},
            ],
            "ssh": ssh,
        }
    )


@dataclass
class Job:
    spec: JobSpec
    cwd: Path
    identity: Identity
    peers: list[Peer]
    user_key: Path  # a key of the user's, authorized through ``ssh.authorized_keys``
    commands: dict[str, str] = field(default_factory=dict)  # ROLE-INDEX: the wrapped command
    envs: dict[str, dict[str, str]] = field(default_factory=dict)
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, name: str) -> subprocess.Popen[bytes]:
        """The task as the agent's wrapper runs it, as the task's uid, its output in
        ``<name>.log``."""
        command = self.commands[name]
        with (self.cwd / f"{name}.log").open("wb") as log:
            process = self._popen(command, name, log)
        self.running.append(process)
        return process

    def _popen(self, command: str, name: str, log: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(  # the agent's own wrapper, as processes.spawn runs it
            ["/bin/sh", "-c", wrapper_for(command), "corral-task", command, "/dev/null", "/dev/null"],
            env=self.envs[name],
            cwd=self.cwd,
            user=self.identity.uid,
            group=self.identity.gid,
            extra_groups=[],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self, name: str) -> str:
        return (self.cwd / f"{name}.log").read_text()


def _job(spec: JobSpec, scratch: Path) -> Job:
    assert ACCOUNT is not None
    assert SSH is not None
    sshd = sshd_binary()
    assert sshd is not None
    identity = Identity(ACCOUNT.pw_uid, ACCOUNT.pw_gid, ACCOUNT.pw_name)
    peers = [Peer("main", 0, "node-a", "127.0.0.1", {"ssh": [_free_port()], "master": [_free_port()]})]
    peers += [Peer("worker", i, "node-a", "127.0.0.1", {"ssh": [_free_port()]}) for i in range(2)]
    user, host, mine = (new_key_pair(f"corral-{JOB_ID}{s}") for s in ("", "-host", "-user"))
    user_key = scratch / "user_key"
    user_key.write_text(mine.private)
    user_key.chmod(0o600)
    assert spec.ssh is not None
    keys = TaskKeys(user.private, user.public, host.private, host.public, (mine.public,))
    job = Job(spec, scratch / JOB_ID, identity, peers, user_key)
    for me in peers:
        role = next(r for r in spec.tasks if r.name == me.role)
        env = task_environment(
            spec,
            job_id=JOB_ID,
            role=me.role,
            task_index=me.index,
            attempt_id=f"att-{me.role}-{me.index}",
            attempt_no=1,
            gpu_indices=[],
            peers=peers,
        )
        env["HOME"] = str(job.cwd)  # (as the sandbox sets it)
        name = f"{me.role}-{me.index}"
        job.commands[name] = wire_job_task(
            spec.ssh, JOB_ID, me, peers, keys, identity, env, job.cwd, (sshd, SSH), role.command
        )
        job.envs[name] = env
    return job


@pytest.fixture
def scratch() -> Iterator[Path]:
    with reachable_dir() as directory:
        yield directory


def _stop_all(job: Job) -> None:
    for process in job.running:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


def _sshd_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as connection:
            return connection.recv(8).startswith(b"SSH-2.0")
    except OSError:
        return False


def test_a_task_reaches_another_by_role_and_index_and_its_variables_come_along(scratch: Path) -> None:
    command = (
        "ssh worker-1 'echo \"$CORRAL_TASK_ROLE-$CORRAL_TASK_INDEX $(id -u)\"'; cat ~/.ssh/config >/dev/null"
    )
    job = _job(generic_spec({"barrier": True, "barrier_timeout_s": 20}, command), scratch)
    try:
        job.start("worker-0")
        job.start("worker-1")
        main = job.start("main-0")
        assert main.wait(30) == 0, job.log("main-0")
        assert job.log("main-0").split() == ["worker-1", str(job.identity.uid)]
        env = job.envs["main-0"]
        assert env["PAI_CONTAINER_SSH_PORT"] == str(job.peers[0].ports["ssh"][0])
        assert env["PATH"].split(":")[0] == str(job.cwd / ".ssh")
    finally:
        _stop_all(job)


def test_the_barrier_waits_for_a_late_sshd(scratch: Path) -> None:
    job = _job(generic_spec({"barrier": True, "barrier_timeout_s": 30}, "ssh worker-0 hostname"), scratch)
    try:
        job.start("worker-1")
        started = time.monotonic()
        main = job.start("main-0")
        time.sleep(2.0)
        assert main.poll() is None, job.log("main-0")  # still waiting for worker-0
        job.start("worker-0")
        assert main.wait(30) == 0, job.log("main-0")
        assert time.monotonic() - started >= 2.0
        assert job.log("main-0").strip() == socket.gethostname()
    finally:
        _stop_all(job)


def test_the_barrier_gives_up_naming_the_task_and_the_end_is_classified(scratch: Path) -> None:
    job = _job(generic_spec({"barrier": True, "barrier_timeout_s": 2}, "echo never"), scratch)
    try:
        job.start("worker-0")
        main = job.start("main-0")
        assert main.wait(30) == BARRIER_EXIT_CODE
        log = job.log("main-0")
        port = job.peers[2].ports["ssh"][0]
        assert f"corral ssh barrier: worker-1 (127.0.0.1:{port}) did not answer within 2 s" in log, log
        assert "never" not in log
        verdict = classify(TaskEnd(BARRIER_EXIT_CODE, log_tail=log))
        assert verdict.reason.startswith("ssh barrier: a task's sshd did not answer"), verdict
    finally:
        _stop_all(job)


def test_the_commands_status_is_the_tasks_and_its_sshd_ends_with_it(scratch: Path) -> None:
    job = _job(generic_spec({}, "sleep 1; exit 3"), scratch)
    try:
        main = job.start("main-0")
        port = job.peers[0].ports["ssh"][0]
        for _ in range(50):
            if _sshd_answers(port):
                break
            time.sleep(0.1)
        assert _sshd_answers(port), job.log("main-0")
        assert main.wait(30) == 3
        for _ in range(50):
            if not _sshd_answers(port):
                break
            time.sleep(0.1)
        assert not _sshd_answers(port), "the task's sshd outlived it"
    finally:
        _stop_all(job)


def _login(job: Job, key: Path, port: int) -> subprocess.CompletedProcess[str]:
    assert ACCOUNT is not None
    return subprocess.run(
        [
            "ssh",
            "-F",
            "/dev/null",
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-p",
            str(port),
            f"{ACCOUNT.pw_name}@127.0.0.1",
            "echo $CORRAL_TASK_ROLE",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_an_authorized_user_key_logs_in_and_another_key_is_refused(scratch: Path) -> None:
    job = _job(generic_spec({"between_tasks": False}), scratch)
    try:
        job.start("worker-0")
        port = job.peers[1].ports["ssh"][0]
        for _ in range(50):
            if _sshd_answers(port):
                break
            time.sleep(0.1)
        done = _login(job, job.user_key, port)
        assert done.returncode == 0, done.stderr + job.log("worker-0")
        assert done.stdout.strip() == "worker"
        other = scratch / "other_key"
        other.write_text(new_key_pair("someone-else").private)
        other.chmod(0o600)
        refused = _login(job, other, port)
        assert refused.returncode == 255
        # Without between_tasks a task holds no key of the job and no config.
        assert not (job.cwd / ".ssh" / "id_ed25519").exists()
        assert "CORRAL_SSH_CONFIG" not in job.envs["worker-0"]
    finally:
        _stop_all(job)
