"""MPI jobs on Kubernetes: the ssh Secret and the pods' additions validate against the
Kubernetes OpenAPI schema (``kubernetes-validate``, strict) and say what mpirun and sshd
need; and through the runner, on real Postgres and the FAKE API server
(tests/launcher/fake_kube_api.py: real HTTP, no kubelet), an MPI job's assignments
become its generation's Secret, owned by the job's Service, and pods that mount it."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from services.api.jobs.repository import JobRepository
from services.api.jobs.submission import Submitter
from services.launcher.job_keys import make_job_keys
from services.launcher.kubernetes.api import KubeApi
from services.launcher.kubernetes.driver import KubernetesDriver
from services.launcher.kubernetes.manifests import OwnerRef, pod_manifest
from services.launcher.kubernetes.mpi import (
    JobSshKeys,
    MpiWiring,
    secret_name,
    ssh_files,
    ssh_secret_manifest,
    with_mpi,
)
from services.launcher.kubernetes.names import pod_name, service_name
from services.launcher.kubernetes.runner import KubernetesRunner
from services.launcher.kubernetes.settings import KubernetesSettings
from shared.db.pool import Database
from shared.ids import new_attempt_id
from shared.jobs import JobSpec
from tests.launcher import attempts
from tests.launcher.fake_kube_api import FakeKubeApi
from tests.launcher.samples import TASK_LAUNCH

VERSIONS = ["1.30", kubernetes_validate.latest_version()]
SETTINGS = KubernetesSettings(namespace="corral")
JOB = TASK_LAUNCH.job_id
OWNER = OwnerRef("v1", "Service", service_name(JOB), "6f1e3c2a-1b2c-4d5e-8f90-0a1b2c3d4e5f")
KEYS = JobSshKeys(
    user_private_key="-----BEGIN OPENSSH PRIVATE KEY-----\nuser\n-----END OPENSSH PRIVATE KEY-----\n",
    user_public_key="ssh-ed25519 AAAAuser corral-job",
    host_private_key="-----BEGIN OPENSSH PRIVATE KEY-----\nhost\n-----END OPENSSH PRIVATE KEY-----\n",
    host_public_key="ssh-ed25519 AAAAhost corral-job-host",
)
WIRING = MpiWiring(generation=2, keys=KEYS, worker_ports=((0, 30001), (1, 30002)), slots_per_worker=4)
WORKER = dataclasses.replace(TASK_LAUNCH, task_role="worker", task_index=1, ports={"ssh": [30002]})
LAUNCHER = dataclasses.replace(
    TASK_LAUNCH, task_role="launcher", task_index=0, gpus=0, ports={"master": [29500]}
)
SSH = "/etc/corral/ssh"


def validate(manifest: dict[str, Any], version: str) -> None:
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        path = ".".join(str(p) for p in error.path)
        pytest.fail(f"{manifest['kind']} invalid for Kubernetes {version} at {path}: {error.message}")


def mpi_pod(launch: Any) -> dict[str, Any]:
    return with_mpi(pod_manifest(launch, SETTINGS, OWNER), launch, WIRING)


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_secret_and_the_mpi_pods_are_valid(version: str) -> None:
    validate(ssh_secret_manifest(JOB, WIRING, SETTINGS, OWNER), version)
    validate(mpi_pod(WORKER), version)
    validate(mpi_pod(LAUNCHER), version)


def test_the_secret_holds_the_generations_keys_and_files() -> None:
    secret = ssh_secret_manifest(JOB, WIRING, SETTINGS, OWNER)
    assert secret["metadata"]["name"] == f"{service_name(JOB)}-ssh-2"
    assert secret["metadata"]["ownerReferences"] == [OWNER.to_manifest()]
    files = secret["stringData"]
    assert files["id_ed25519"] == KEYS.user_private_key
    assert files["authorized_keys"] == "ssh-ed25519 AAAAuser corral-job\n"
    assert files["ssh_host_ed25519_key"] == KEYS.host_private_key
    assert files["known_hosts"] == (
        "worker-0 ssh-ed25519 AAAAhost corral-job-host\nworker-1 ssh-ed25519 AAAAhost corral-job-host\n"
    )
    assert files["hostfile"] == "worker-0 slots=4\nworker-1 slots=4\n"
    service = service_name(JOB)
    assert files["ssh_config"].startswith(
        f"Host worker-0\n    HostName worker-0.{service}.corral.svc\n"
        "    Port 30001\n    HostKeyAlias worker-0\n"
        f"Host worker-1\n    HostName worker-1.{service}.corral.svc\n"
        "    Port 30002\n    HostKeyAlias worker-1\n"
        "Host *\n"
    )
    for line in (
        f"IdentityFile {SSH}/id_ed25519",
        f"UserKnownHostsFile {SSH}/known_hosts",
        "StrictHostKeyChecking yes",
        "BatchMode yes",
    ):
        assert f"    {line}\n" in files["ssh_config"]
    sshd = files["sshd_config"].splitlines()
    assert f"HostKey {SSH}/ssh_host_ed25519_key" in sshd
    assert f"AuthorizedKeysFile {SSH}/authorized_keys" in sshd
    assert {"PidFile none", "UsePAM no", "PasswordAuthentication no"} <= set(sshd)


def test_a_cluster_domain_reaches_the_ssh_config() -> None:
    settings = KubernetesSettings(namespace="ml", cluster_domain="cluster.local")
    config = ssh_files(JOB, WIRING, settings)["ssh_config"]
    assert f"HostName worker-1.{service_name(JOB)}.ml.svc.cluster.local\n" in config


def test_every_mpi_pod_mounts_the_secret_read_only() -> None:
    for launch in (WORKER, LAUNCHER):
        spec = mpi_pod(launch)["spec"]
        volume = {"name": "corral-ssh", "secret": {"secretName": secret_name(JOB, 2), "defaultMode": 0o400}}
        assert volume in spec["volumes"]
        mounts = spec["containers"][0]["volumeMounts"]
        assert {"name": "corral-ssh", "mountPath": SSH, "readOnly": True} in mounts
        assert spec["securityContext"]["fsGroup"] == SETTINGS.run_as_group  # the files' group
        # The stable name the ssh config points at: <hostname>.<subdomain = the Service>.
        assert spec["subdomain"] == service_name(JOB)
    assert mpi_pod(WORKER)["spec"]["hostname"] == "worker-1"
    assert mpi_pod(LAUNCHER)["spec"]["hostname"] == "launcher-0"


def test_the_pods_environment_points_at_the_files_and_a_worker_gets_its_sshd() -> None:
    worker, launcher = env_of(mpi_pod(WORKER)), env_of(mpi_pod(LAUNCHER))
    for env in (worker, launcher):
        assert env["CORRAL_HOSTFILE"] == f"{SSH}/hostfile"
        assert env["OMPI_MCA_orte_default_hostfile"] == f"{SSH}/hostfile"
        assert env["CORRAL_SSH_CONFIG"] == f"{SSH}/ssh_config"
        assert env["OMPI_MCA_plm_rsh_agent"] == f"ssh -F {SSH}/ssh_config"
        assert env["HOME"] == "/work"  # the pod's own variables stay
    assert worker["CORRAL_SSHD_COMMAND"] == f"/usr/sbin/sshd -D -e -f {SSH}/sshd_config -p 30002"
    assert "CORRAL_SSHD_COMMAND" not in launcher
    assert {"containerPort": 30002, "protocol": "TCP"} in mpi_pod(WORKER)["spec"]["containers"][0]["ports"]


def test_a_pod_of_another_job_is_left_as_it_was() -> None:
    plain = pod_manifest(WORKER, SETTINGS, OWNER)
    assert "corral-ssh" not in str(plain)
    assert mpi_pod(WORKER) != plain


# -- through the runner and the FAKE API server ------------------------------------

NODE = "k8s-gpu-1"
RUNNER_SETTINGS = KubernetesSettings(namespace="corral", retry_delay_s=0.05, default_image="busybox:1.36")


@pytest.fixture
async def runner(db: Database, kube: FakeKubeApi, tmp_path: Path) -> AsyncIterator[KubernetesRunner]:
    async with (
        ApiClient(Configuration(host=kube.url)) as client,
        KubernetesDriver(client, RUNNER_SETTINGS) as driver,
    ):
        runner = KubernetesRunner(db, driver, log_dir=tmp_path / "logs", node_pattern="^k8s-")
        await attempts.known_nodes(db, NODE)
        await runner.hold_leases(15)
        yield runner


async def mpi_job(db: Database, workers: int) -> tuple[str, dict[tuple[str, int], str]]:
    """A scheduled MPI job (a launcher, ``workers`` one-GPU workers) with its attempts
    assigned to ``NODE`` and its generation's keys, as the launcher leaves them."""
    spec = JobSpec.model_validate(
        {
            "name": "allreduce",
            "framework": "mpi",
            "tasks": [
                {"name": "launcher", "instances": 1, "command": "mpirun -np 2 ./allreduce"},
                {"name": "worker", "instances": workers, "resources": {"gpus": 1}},
            ],
        }
    )
    job_id = (await Submitter(JobRepository(db)).submit(spec, "alice", None)).job.id
    await db.execute("UPDATE api.jobs SET state = 'SCHEDULED', generation = 1 WHERE id = $1", job_id)
    ids: dict[tuple[str, int], str] = {}
    tasks: list[tuple[str, int, dict[str, list[int]]]] = [("launcher", 0, {"master": [29500]})]
    tasks += [("worker", i, {"ssh": [30001 + i]}) for i in range(workers)]
    for role, index, ports in tasks:
        ids[role, index] = new_attempt_id()
        await db.execute(
            "INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,"
            " node_id, gpu_indices, state, ports) VALUES ($1, $2, 1, $3, $4, 1, $5, $6, 'ASSIGNED', $7)",
            ids[role, index],
            job_id,
            role,
            index,
            NODE,
            [index] if role == "worker" else [],
            ports,
        )
    async with db.transaction() as conn:
        await make_job_keys(conn, job_id, 1)
    return job_id, ids


async def test_an_mpi_jobs_pods_mount_its_generations_secret_owned_by_its_service(
    db: Database, kube: FakeKubeApi, runner: KubernetesRunner
) -> None:
    job_id, ids = await mpi_job(db, workers=2)
    for attempt_id in ids.values():
        await runner.start_attempt(attempt_id, NODE)

    assert sorted(kube.pods) == sorted(pod_name(a) for a in ids.values())
    name = secret_name(job_id, 1)
    assert list(kube.secrets) == [name]  # one per generation, however many pods made it
    secret_posts = [c for c in kube.calls if c[0] == "POST" and c[1].endswith("/secrets")]
    assert len(secret_posts) == len(ids)  # each start tried; 409 after the first
    secret, service = kube.secrets[name], kube.services[service_name(job_id)]
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "name": service_name(job_id),
            "uid": service["metadata"]["uid"],
        }
    ]
    keys = await db.fetchrow("SELECT * FROM launcher.job_ssh_keys WHERE job_id = $1", job_id)
    assert keys is not None
    assert secret["stringData"]["id_ed25519"] == keys["user_private_key"]
    assert secret["stringData"]["hostfile"] == "worker-0 slots=1\nworker-1 slots=1\n"
    assert "Port 30002\n" in secret["stringData"]["ssh_config"]

    for (role, index), attempt_id in ids.items():
        pod = kube.pods[pod_name(attempt_id)]
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["corral-ssh"]["secret"]["secretName"] == name
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["OMPI_MCA_plm_rsh_agent"] == f"ssh -F {SSH}/ssh_config"
        if role == "worker":
            assert env["CORRAL_SSHD_COMMAND"].endswith(f"-p {30001 + index}")
    assert (await attempt_state(db, ids["launcher", 0])) == "STARTING"

    # The Service's garbage collection takes the Secret with the pods.
    async with ApiClient(Configuration(host=kube.url)) as client:
        await KubeApi(client, "corral").delete_service(service_name(job_id))
    assert kube.secrets == {}
    assert kube.pods == {}


async def test_an_mpi_job_without_keys_fails_to_start_and_says_why(
    db: Database, kube: FakeKubeApi, runner: KubernetesRunner
) -> None:
    job_id, ids = await mpi_job(db, workers=1)
    await db.execute("DELETE FROM launcher.job_ssh_keys WHERE job_id = $1", job_id)
    await runner.start_attempt(ids["worker", 0], NODE)
    assert kube.pods == {}
    row = await db.fetchrow("SELECT state, reason FROM launcher.attempts WHERE id = $1", ids["worker", 0])
    assert row is not None
    assert row["state"] == "EXITED"
    assert "has no ssh keys for generation 1" in row["reason"]


async def attempt_state(db: Database, attempt_id: str) -> str:
    return str(await db.fetchval("SELECT state FROM launcher.attempts WHERE id = $1", attempt_id))
