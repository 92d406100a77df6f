"""The ssh files and variables an MPI job's tasks get (services/launcher/agent/mpi/)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from services.launcher.agent.environment import Peer
from services.launcher.agent.mpi.environment import mpi_environment, session_environment
from services.launcher.agent.mpi.ssh_files import SshPaths, ssh_config_text, sshd_config_text
from services.launcher.agent.mpi.wiring import JobKeys, job_texts
from services.launcher.agent.mpi.writing import write_ssh_files
from services.launcher.agent.sandbox.identities import Identity
from tests.launcher.mpi_samples import (
    JOB_ID,
    login_account,
    loopback_peers,
    mpi_spec,
    reachable_dir,
    ssh_keys,
)

PATHS = SshPaths(Path("/work/job-1/.ssh"))
WORKERS = [
    Peer("worker", 1, "node-b", "10.0.0.2", {"ssh": [20002]}),
    Peer("worker", 0, "node-a", "10.0.0.1", {"ssh": [20001]}),
]
LAUNCHER = Peer("launcher", 0, "node-a", "10.0.0.1", {"master": [29500]})


def _keys() -> JobKeys:
    keys = ssh_keys()
    return JobKeys(
        keys["user_private_key"], keys["user_public_key"], keys["host_private_key"], keys["host_public_key"]
    )


def test_the_hostfiles_name_each_worker_with_its_gpus_as_slots() -> None:
    texts = job_texts(mpi_spec(gpus=4), JOB_ID, [LAUNCHER, *WORKERS], _keys(), "corral-5000", PATHS)
    assert texts[PATHS.hostfile] == "worker-0 slots=4\nworker-1 slots=4\n"
    assert texts[PATHS.hydra_hostfile] == "worker-0:4\nworker-1:4\n"


def test_slots_per_worker_overrides_the_gpus_and_no_gpu_is_one_slot() -> None:
    texts = job_texts(mpi_spec(gpus=4, mpi={"slots_per_worker": 2}), JOB_ID, WORKERS, _keys(), "u", PATHS)
    assert texts[PATHS.hostfile] == "worker-0 slots=2\nworker-1 slots=2\n"
    texts = job_texts(mpi_spec(gpus=0), JOB_ID, WORKERS, _keys(), "u", PATHS)
    assert texts[PATHS.hostfile] == "worker-0 slots=1\nworker-1 slots=1\n"


def test_the_host_key_is_pinned_under_the_job_alias() -> None:
    keys = _keys()
    texts = job_texts(mpi_spec(), JOB_ID, WORKERS, keys, "u", PATHS)
    alias, key_type, key = texts[PATHS.known_hosts].split()[:3]
    assert (alias, key_type) == (f"corral-{JOB_ID}", "ssh-ed25519")
    assert key == keys.host_public.split()[1]
    assert texts[PATHS.authorized_keys].split()[1] == keys.user_public.split()[1]


def test_the_ssh_config_names_each_worker_and_pins_its_key() -> None:
    text = ssh_config_text(JOB_ID, sorted(WORKERS, key=lambda p: p.index), "corral-5000", PATHS)
    assert (
        "Host worker-1\n  HostName 10.0.0.2\n  Port 20002\n"
        f"  HostKeyAlias corral-{JOB_ID}\n  User corral-5000\n"
    ) in text
    for line in (
        'IdentityFile "/work/job-1/.ssh/id_ed25519"',
        "IdentitiesOnly yes",
        'UserKnownHostsFile "/work/job-1/.ssh/known_hosts"',
        "StrictHostKeyChecking yes",
        "BatchMode yes",
        "LogLevel ERROR",
    ):
        assert f"  {line}\n" in text
    assert text.index("Host worker-0") < text.index("Host worker-1") < text.index("Host *")


SESSION_ENV = {
    "PATH": "/opt/conda/bin:/usr/bin",
    "CUDA_VISIBLE_DEVICES": "2,3",
    "GREETING": "hello world # not a comment, it's $HOME",
    "EMPTY": "",
    "QUOTED": 'say "hi"',
    "BACKSLASHED": "C:\\temp",
    "TWO_LINES": "a\nAllowUsers root",
}


def test_sshd_config_carries_the_worker_environment_quoted_and_skips_what_cannot_be() -> None:
    text = sshd_config_text(WORKERS[1], "corral-5000", PATHS, SESSION_ENV)
    for line in (
        "Port 20001",
        "ListenAddress 10.0.0.1",
        'HostKey "/work/job-1/.ssh/ssh_host_ed25519_key"',
        'AuthorizedKeysFile "/work/job-1/.ssh/authorized_keys"',
        "PidFile none",
        "UsePAM no",
        "StrictModes no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "AllowUsers corral-5000",
        "PermitRootLogin no",
        "X11Forwarding no",
        "AllowTcpForwarding no",
        "LogLevel ERROR",
    ):
        assert f"{line}\n" in text.splitlines(keepends=True)
    setenv = [line for line in text.splitlines() if line.startswith("SetEnv")]
    assert len(setenv) == 1  # sshd keeps the first SetEnv line only
    assert 'PATH="/opt/conda/bin:/usr/bin"' in setenv[0]
    assert 'EMPTY=""' in setenv[0]
    for skipped in ("QUOTED", "BACKSLASHED", "TWO_LINES"):
        assert f"{skipped}=" not in text
        assert f"# {skipped} is not carried" in text
    assert "AllowUsers root" not in text


ACCOUNT = login_account()


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("sshd") is None or ACCOUNT is None,
    reason="needs root, sshd and an unprivileged account to run it as",
)
def test_sshd_itself_reads_the_carried_values_back() -> None:
    assert ACCOUNT is not None
    with reachable_dir() as scratch:
        shown = _sshd_effective_config(scratch, ACCOUNT)
    carried = {line.removeprefix("setenv ") for line in shown.splitlines() if line.startswith("setenv ")}
    assert carried == {
        "PATH=/opt/conda/bin:/usr/bin",
        "CUDA_VISIBLE_DEVICES=2,3",
        "GREETING=hello world # not a comment, it's $HOME",
        "EMPTY=",
    }


def _sshd_effective_config(scratch: Path, account: pwd.struct_passwd) -> str:
    paths = SshPaths(scratch / ".ssh")
    keys = _keys()
    assert keys.host_private is not None
    worker = Peer("worker", 0, "node-a", "127.0.0.1", {"ssh": [20001]})
    texts = {paths.host_key: keys.host_private, paths.authorized_keys: keys.user_public + "\n"}
    texts[paths.sshd_config("worker", 0)] = sshd_config_text(worker, "nobody", paths, SESSION_ENV)
    write_ssh_files(paths.root, texts, Identity(account.pw_uid, account.pw_gid, account.pw_name))
    return subprocess.run(  # (as the task's user: as root, sshd -T wants /run/sshd)
        [shutil.which("sshd") or "sshd", "-T", "-f", str(paths.sshd_config("worker", 0))],
        user=account.pw_uid,
        group=account.pw_gid,
        extra_groups=[],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another uid needs root")
def test_files_are_the_tasks_own_private_and_rewritten_atomically(tmp_path: Path) -> None:
    cwd = tmp_path / "work" / JOB_ID
    paths = SshPaths(cwd / ".ssh")
    identity = Identity(54321, 54322, "corral-54321")
    texts = job_texts(mpi_spec(), JOB_ID, WORKERS, _keys(), identity.name, paths)
    for _ in range(2):  # a second task of the job on the node writes the same files
        write_ssh_files(paths.root, texts, identity, programs=frozenset({paths.ssh_wrapper}))
    info = paths.root.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o700, 54321, 54322)
    assert (cwd.stat().st_uid, cwd.stat().st_gid) == (54321, 54322)
    assert sorted(p.name for p in paths.root.iterdir()) == sorted(p.name for p in texts)  # no temporaries
    for path, text in texts.items():
        info = path.stat()
        mode = 0o700 if path == paths.ssh_wrapper else 0o600
        assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (mode, 54321, 54322), path
        assert path.read_text() == text


def test_mpirun_is_pointed_at_the_files_and_at_loopback_when_every_task_is_on_it() -> None:
    peers = loopback_peers([20001, 20002])
    env = mpi_environment(PATHS, peers, "worker", 1, "/usr/sbin/sshd")
    assert env["CORRAL_SSHD_COMMAND"] == "/usr/sbin/sshd -D -e -f /work/job-1/.ssh/sshd_config-worker-1"
    assert env["CORRAL_SSH_CONFIG"] == "/work/job-1/.ssh/config"
    assert env["CORRAL_HOSTFILE"] == env["OMPI_MCA_orte_default_hostfile"] == "/work/job-1/.ssh/hostfile"
    assert env["OMPI_MCA_plm_rsh_agent"] == "ssh -F /work/job-1/.ssh/config"
    assert env["OMPI_MCA_plm_rsh_no_tree_spawn"] == "1"  # the config's path is the launcher node's
    assert env["HYDRA_LAUNCHER_EXEC"] == "/work/job-1/.ssh/ssh"
    assert env["HYDRA_HOST_FILE"] == "/work/job-1/.ssh/hostfile.hydra"
    assert env["HYDRA_LAUNCHER"] == "ssh"
    assert env["OMPI_MCA_oob_tcp_if_include"] == env["OMPI_MCA_btl_tcp_if_include"] == "lo"
    launcher = mpi_environment(PATHS, [LAUNCHER, *WORKERS], "launcher", 0, None)
    assert "CORRAL_SSHD_COMMAND" not in launcher
    assert "OMPI_MCA_btl_tcp_if_include" not in launcher
    assert launcher["OMPI_MCA_if_base_do_not_resolve"] == "1"  # (the names are ssh aliases)


def test_the_wrapper_runs_ssh_with_the_jobs_config() -> None:
    texts = job_texts(mpi_spec(), JOB_ID, WORKERS, _keys(), "u", PATHS)
    assert texts[PATHS.ssh_wrapper] == "#!/bin/sh\nexec ssh -F '/work/job-1/.ssh/config' \"$@\"\n"


def test_sessions_get_the_workers_variables_but_not_its_identity_or_ranks() -> None:
    env = {
        "PATH": "/usr/bin",
        "HOME": "/work/job-1",
        "USER": "corral-5000",
        "RANK": "3",
        "HOROVOD_RANK": "2",
        "CORRAL_JOB_ID": "job-1",
        "OMP_NUM_THREADS": "4",
        "NCCL_DEBUG": "INFO",
    }
    assert session_environment(env) == {
        "PATH": "/usr/bin",
        "CORRAL_JOB_ID": "job-1",
        "OMP_NUM_THREADS": "4",
        "NCCL_DEBUG": "INFO",
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="the attack is on root's writes")
def test_a_ssh_directory_swapped_for_a_link_is_refused_and_nothing_is_written_through_it(
    tmp_path: Path,
) -> None:
    """A task of the job replaces ``.ssh`` with a link to a host directory before another
    of its tasks starts: root must neither write, chmod nor chown through it."""
    cwd = tmp_path / "work" / JOB_ID
    paths = SshPaths(cwd / ".ssh")
    identity = Identity(54321, 54322, "corral-54321")
    texts = job_texts(mpi_spec(), JOB_ID, WORKERS, _keys(), identity.name, paths)
    write_ssh_files(paths.root, texts, identity, programs=frozenset({paths.ssh_wrapper}))
    host_dir = tmp_path / "host-etc"
    host_dir.mkdir(mode=0o755)
    shutil.rmtree(paths.root)
    paths.root.symlink_to(host_dir)
    with pytest.raises(OSError, match="not a directory of its own"):
        write_ssh_files(paths.root, texts, identity, programs=frozenset({paths.ssh_wrapper}))
    info = host_dir.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o755, 0)
    assert list(host_dir.iterdir()) == []
    # A link planted under a file's name inside the real directory is replaced, not followed.
    paths.root.unlink()
    write_ssh_files(paths.root, texts, identity, programs=frozenset({paths.ssh_wrapper}))
    target = host_dir / "passwd"
    target.write_text("root's\n")
    paths.config.unlink()
    paths.config.symlink_to(target)
    write_ssh_files(paths.root, texts, identity, programs=frozenset({paths.ssh_wrapper}))
    assert target.read_text() == "root's\n"
    assert target.stat().st_uid == 0
    assert not paths.config.is_symlink()
