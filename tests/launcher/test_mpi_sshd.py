"""A 2-worker MPI job's ssh wiring with real processes, without the rest of the stack:
the files written as root for the task's uid, each worker's sshd started as that uid by
its default command, then ``ssh`` and ``mpirun`` from the launcher's environment.

Needs root (to run as another uid), sshd and ssh, and an unprivileged account with a
shell (an sshd session runs the user's shell); skipped otherwise."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.launcher.agent.environment import Peer, task_environment
from services.launcher.agent.mpi.barrier import SshTarget, wait_for_sshds
from services.launcher.agent.mpi.wiring import job_keys, sshd_binary, wire_task
from services.launcher.agent.sandbox.identities import Identity
from shared.mpi_spec import WORKER_COMMAND
from tests.launcher.mpi_samples import (
    JOB_ID,
    login_account,
    loopback_peers,
    mpi_spec,
    reachable_dir,
    ssh_keys,
)

ACCOUNT = login_account()
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or sshd_binary() is None or shutil.which("ssh") is None or ACCOUNT is None,
    reason="needs root, sshd, ssh and an unprivileged account with a shell",
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


Job = tuple[Path, Identity, list[Peer], dict[tuple[str, int], dict[str, str]]]


@pytest.fixture
def job() -> Iterator[Job]:
    """The job's working directory, its identity, peers, and every task's environment
    (the files written as the agent writes them)."""
    assert ACCOUNT is not None
    identity = Identity(ACCOUNT.pw_uid, ACCOUNT.pw_gid, ACCOUNT.pw_name)
    spec = mpi_spec(workers=2, gpus=0)
    peers = loopback_peers([_free_port(), _free_port()])
    keys = job_keys(ssh_keys())
    assert keys is not None
    with reachable_dir() as scratch:
        cwd = scratch / JOB_ID
        envs = {}
        for me in peers:
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
            env["HOME"] = str(cwd)  # (as the sandbox sets it)
            wire_task(spec, JOB_ID, me, peers, keys, identity, env, cwd, sshd_binary())
            envs[(me.role, me.index)] = env
        yield cwd, identity, peers, envs


def _as(
    identity: Identity, argv: list[str], env: dict[str, str], cwd: Path, resolv_conf: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``argv`` run as the task's uid; with ``resolv_conf``, in a mount namespace where it
    stands in for ``/etc/resolv.conf``."""
    ids: dict[str, Any] = {"user": identity.uid, "group": identity.gid, "extra_groups": []}
    if resolv_conf is not None:
        setpriv = ["--reuid", str(identity.uid), "--regid", str(identity.gid), "--clear-groups"]
        script = 'mount --bind "$0" /etc/resolv.conf && exec setpriv "$@"'
        unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(resolv_conf)]
        argv = [*unshare, *setpriv, *argv]
        ids = {}
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False, **ids
    )


async def _start_sshd(env: dict[str, str], cwd: Path, identity: Identity) -> asyncio.subprocess.Process:
    """The worker's default command, as the task's uid."""
    return await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        WORKER_COMMAND,
        env=env,
        cwd=cwd,
        user=identity.uid,
        group=identity.gid,
        extra_groups=[],
        start_new_session=True,
    )


async def _stop(sshd: asyncio.subprocess.Process) -> None:
    os.killpg(sshd.pid, signal.SIGTERM)
    await sshd.wait()


async def test_the_launcher_reaches_each_worker_through_its_sshd(job: Job) -> None:
    cwd, identity, peers, envs = job
    workers = [p for p in peers if p.role == "worker"]
    sshds = [await _start_sshd(envs[("worker", w.index)], cwd, identity) for w in workers]
    try:
        targets = [SshTarget(f"worker-{w.index}", w.host, w.ports["ssh"][0]) for w in workers]
        assert await wait_for_sshds(targets, 10, lambda: False)
        launcher = envs[("launcher", 0)]
        config = launcher["CORRAL_SSH_CONFIG"]
        done = await asyncio.to_thread(
            _as,
            identity,
            ["ssh", "-F", config, "worker-1", "echo $CORRAL_TASK_INDEX $(id -u)"],
            launcher,
            cwd,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["1", str(identity.uid)]  # (the worker's variables, via SetEnv)
        # The agents mpirun is given (Open MPI's command line, Hydra's wrapper):
        for agent in (launcher["OMPI_MCA_plm_rsh_agent"].split(), [launcher["HYDRA_LAUNCHER_EXEC"]]):
            done = await asyncio.to_thread(_as, identity, [*agent, "worker-0", "hostname"], launcher, cwd)
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == socket.gethostname()
        if shutil.which("mpirun"):
            done = await asyncio.to_thread(
                _as,
                identity,
                ["mpirun", "-np", "2", "sh", "-c", "echo rank $OMPI_COMM_WORLD_RANK"],
                launcher,
                cwd,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert sorted(done.stdout.split("\n")[:2]) == ["rank 0", "rank 1"]
    finally:
        for sshd in sshds:
            await _stop(sshd)


class _SilentResolver(asyncio.DatagramProtocol):
    """A DNS server that writes down the names it is asked for and never answers: a
    cluster's resolver that is down or unreachable."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:  # noqa: ARG002
        labels, at = [], 12  # (the question's name follows the 12-byte header)
        while at < len(data) and data[at]:
            labels.append(data[at + 1 : at + 1 + data[at]].decode(errors="replace"))
            at += 1 + data[at]
        self.asked.append(".".join(labels))


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
async def test_mpirun_asks_no_resolver_for_the_workers_names(job: Job, tmp_path: Path) -> None:
    cwd, identity, peers, envs = job
    address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.53"
    try:
        transport, resolver = await asyncio.get_running_loop().create_datagram_endpoint(
            _SilentResolver, local_addr=(address, 53)
        )
    except OSError as exc:  # (a DNS server of this machine's own on the wildcard address)
        pytest.skip(f"cannot listen on {address}:53 for the stand-in resolver: {exc}")
    resolv_conf = tmp_path / "resolv.conf"
    resolv_conf.write_text(f"nameserver {address}\noptions timeout:1 attempts:1\n")
    resolv_conf.chmod(0o644)
    launcher = envs[("launcher", 0)]
    workers = [p for p in peers if p.role == "worker"]
    sshds = [await _start_sshd(envs[("worker", w.index)], cwd, identity) for w in workers]
    try:
        # The stand-in is the one asked, in that namespace (no cache or other source between).
        probe = ["getent", "hosts", "corral-probe.invalid"]
        await asyncio.to_thread(_as, identity, probe, launcher, cwd, resolv_conf)
        assert "corral-probe.invalid" in resolver.asked, resolver.asked
        targets = [SshTarget(f"worker-{w.index}", w.host, w.ports["ssh"][0]) for w in workers]
        assert await wait_for_sshds(targets, 10, lambda: False)
        argv = ["mpirun", "-np", "2", "sh", "-c", "echo rank $OMPI_COMM_WORLD_RANK"]
        done = await asyncio.to_thread(_as, identity, argv, launcher, cwd, resolv_conf)
        assert done.returncode == 0, done.stdout + done.stderr
        assert sorted(done.stdout.split("\n")[:2]) == ["rank 0", "rank 1"]
        assert [name for name in resolver.asked if name.startswith("worker-")] == []
    finally:
        transport.close()
        for sshd in sshds:
            await _stop(sshd)


async def test_a_host_that_does_not_hold_the_jobs_host_key_is_refused(job: Job) -> None:
    cwd, identity, _, envs = job
    launcher = envs[("launcher", 0)]
    known_hosts = cwd / ".ssh" / "known_hosts"
    other = job_keys(ssh_keys())
    assert other is not None
    known_hosts.write_text(f"corral-{JOB_ID} {other.host_public}\n")  # pinned: some other key
    worker = envs[("worker", 0)]
    sshd = await _start_sshd(worker, cwd, identity)
    try:
        port = int(worker["CORRAL_PORT_SSH"])
        assert await wait_for_sshds([SshTarget("worker-0", "127.0.0.1", port)], 10, lambda: False)
        done = await asyncio.to_thread(
            _as, identity, ["ssh", "-F", launcher["CORRAL_SSH_CONFIG"], "worker-0", "true"], launcher, cwd
        )
        assert done.returncode == 255
    finally:
        await _stop(sshd)
