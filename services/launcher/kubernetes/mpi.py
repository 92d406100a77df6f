"""MPI and Horovod jobs on Kubernetes: the job's ssh Secret and what its pods add to
theirs, in the shape of the MPI Operator's MPIJob (v2).

- **One Secret per job generation** (``<service>-ssh-<generation>``), holding the
  generation's keys from ``launcher.job_ssh_keys`` (``services/launcher/job_keys.py``)
  and the files made from them (``mpi_files.py``): ``id_ed25519`` and
  ``authorized_keys`` (the user key pair), ``ssh_host_ed25519_key`` and ``known_hosts``
  (the host key, pinned under every worker's alias), ``ssh_config``, ``sshd_config`` and
  ``hostfile``. The generated files live in the same Secret rather than a ConfigMap: it
  is one object to create, to find by name and to collect, and every file in it comes
  from the same generation, so a pod can never mount a ``known_hosts`` of one
  generation beside an ``ssh_config`` of another. None of them is harmful to keep
  secret. The Secret is owned by the job's headless Service, as the pods are, so it
  goes with the Service (and an earlier generation's with it: the next generation's
  keys have another name, so a retry never waits on a deletion). Its creation is
  idempotent: 409 AlreadyExists means another pod of the generation made it.
- **Every pod of the job** mounts the Secret read-only at ``SSH_DIR`` with mode 0400.
  The kubelet makes its files root's with the pod's ``fsGroup`` (the task's group, as
  ``manifests.py`` sets it) and adds the group's read bit, so the task's user reads
  them through its group; ssh and sshd refuse a key that is too open only when the
  key is the user's own, and these are root's.
- **Names**: the hostfile and the ssh config call worker ``i`` by its pod hostname,
  ``worker-<i>``, and the config maps that alias to the pod's stable DNS name through
  the headless Service (``<hostname>.<service>.<namespace>.svc``, ``names.py``) and its
  allocated ``ssh`` port. The alias being the hostname means Open MPI's idea of a
  node's name and the node's own agree.
- **Environment**: ``CORRAL_HOSTFILE``, ``CORRAL_SSH_CONFIG``,
  ``OMPI_MCA_orte_default_hostfile`` and ``OMPI_MCA_plm_rsh_agent`` (``ssh -F
  <config>``) on every pod, and on a worker ``CORRAL_SSHD_COMMAND``: the platform's
  sshd in the foreground on the worker's own port, which the worker's default command
  (``shared.mpi_spec.WORKER_COMMAND``) runs.

The image must have ``ssh`` and ``sshd`` (openssh) and a passwd entry for the pod's
uid (``CORRAL_KUBERNETES_RUN_AS_USER``): both refuse to run for a user they cannot
name, as with the MPI Operator.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.launcher.agent.environment import Peer
from services.launcher.drivers import TaskLaunch
from services.launcher.kubernetes.manifests import (
    CONTAINER_NAME,
    Manifest,
    ManifestError,
    OwnerRef,
    job_labels,
)
from services.launcher.kubernetes.mpi_files import (
    SshHost,
    hostfile_text,
    known_hosts_text,
    ssh_config_text,
    sshd_config_text,
)
from services.launcher.kubernetes.names import GENERATION_ANNOTATION, pod_dns_name, pod_hostname, service_name
from services.launcher.kubernetes.settings import KubernetesSettings
from services.launcher.repository import SQL
from shared.db.pool import Database
from shared.jobs import JobSpec
from shared.mpi_spec import MPI_FRAMEWORKS, SSH_PORT_LABEL, WORKER_ROLE, slots_per_worker

SSH_DIR = "/etc/corral/ssh"
SSH_VOLUME = "corral-ssh"
SSH_FILE_MODE = 0o400
SSHD = "/usr/sbin/sshd"
DEFAULT_SSH_PORT = 2222  # a worker allocated no ssh port (the spec always gives one)

USER_KEY = "id_ed25519"
AUTHORIZED_KEYS = "authorized_keys"
HOST_KEY = "ssh_host_ed25519_key"
KNOWN_HOSTS = "known_hosts"
SSH_CONFIG = "ssh_config"
SSHD_CONFIG = "sshd_config"
HOSTFILE = "hostfile"


class MissingJobKeys(ManifestError):
    """An MPI job's generation has no ssh keys (the launcher makes them with its attempts)."""


@dataclass(frozen=True)
class JobSshKeys:
    user_private_key: str
    user_public_key: str
    host_private_key: str
    host_public_key: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any] | str) -> JobSshKeys:
        """From a ``job_ssh_keys`` row, or the claim's ``ssh_keys`` jsonb (a str or a
        dict, as asyncpg's codec gives it)."""
        values = json.loads(row) if isinstance(row, str) else row
        return cls(
            user_private_key=str(values["user_private_key"]),
            user_public_key=str(values["user_public_key"]),
            host_private_key=str(values["host_private_key"]),
            host_public_key=str(values["host_public_key"]),
        )


@dataclass(frozen=True)
class MpiWiring:
    """What the pods of one MPI job generation share: its keys and its workers."""

    generation: int
    keys: JobSshKeys
    worker_ports: tuple[tuple[int, int], ...]  # (worker index, its ssh port), by index
    slots_per_worker: int


def secret_name(job_id: str, generation: int) -> str:
    return f"{service_name(job_id)}-ssh-{generation}"


def sshd_command(port: int) -> str:
    return f"{SSHD} -D -e -f {SSH_DIR}/{SSHD_CONFIG} -p {port}"


def _worker_hosts(job_id: str, wiring: MpiWiring, settings: KubernetesSettings) -> list[SshHost]:
    return [
        SshHost(
            alias=pod_hostname(WORKER_ROLE, index),
            address=pod_dns_name(job_id, WORKER_ROLE, index, settings.namespace, settings.cluster_domain),
            port=port,
        )
        for index, port in wiring.worker_ports
    ]


def ssh_files(job_id: str, wiring: MpiWiring, settings: KubernetesSettings) -> dict[str, str]:
    """The Secret's files, by key (the file's name under ``SSH_DIR``)."""
    hosts = _worker_hosts(job_id, wiring, settings)
    aliases = [host.alias for host in hosts]
    keys = wiring.keys
    return {
        USER_KEY: keys.user_private_key,
        AUTHORIZED_KEYS: f"{keys.user_public_key.strip()}\n",
        HOST_KEY: keys.host_private_key,
        KNOWN_HOSTS: known_hosts_text(aliases, keys.host_public_key),
        SSH_CONFIG: ssh_config_text(
            hosts, identity_file=f"{SSH_DIR}/{USER_KEY}", known_hosts_file=f"{SSH_DIR}/{KNOWN_HOSTS}"
        ),
        SSHD_CONFIG: sshd_config_text(
            host_key_file=f"{SSH_DIR}/{HOST_KEY}", authorized_keys_file=f"{SSH_DIR}/{AUTHORIZED_KEYS}"
        ),
        HOSTFILE: hostfile_text(aliases, wiring.slots_per_worker),
    }


def ssh_secret_manifest(
    job_id: str, wiring: MpiWiring, settings: KubernetesSettings, owner: OwnerRef | None = None
) -> Manifest:
    metadata: Manifest = {
        "name": secret_name(job_id, wiring.generation),
        "namespace": settings.namespace,
        "labels": job_labels(job_id),
        "annotations": {GENERATION_ANNOTATION: str(wiring.generation)},
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner.to_manifest()]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "immutable": True,  # a generation's keys never change; the kubelet need not watch it
        "stringData": ssh_files(job_id, wiring, settings),
    }


def mpi_environment(launch: TaskLaunch, wiring: MpiWiring) -> dict[str, str]:
    """The variables an MPI job's pod gets besides the task's own."""
    ssh = f"ssh -F {SSH_DIR}/{SSH_CONFIG}"
    env = {
        "CORRAL_HOSTFILE": f"{SSH_DIR}/{HOSTFILE}",
        "CORRAL_SSH_CONFIG": f"{SSH_DIR}/{SSH_CONFIG}",
        "OMPI_MCA_orte_default_hostfile": f"{SSH_DIR}/{HOSTFILE}",
        "OMPI_MCA_plm_rsh_agent": ssh,
    }
    if launch.task_role == WORKER_ROLE:
        port = dict(wiring.worker_ports).get(launch.task_index, DEFAULT_SSH_PORT)
        env["CORRAL_SSHD_COMMAND"] = sshd_command(port)
    return env


def with_mpi(pod: Manifest, launch: TaskLaunch, wiring: MpiWiring) -> Manifest:
    """``pod`` (``manifests.pod_manifest``) with the job's Secret mounted and the MPI
    environment; the pod's own variables of the same names give way to the platform's."""
    spec = {**pod["spec"]}
    spec["volumes"] = [
        *spec["volumes"],
        {
            "name": SSH_VOLUME,
            "secret": {
                "secretName": secret_name(launch.job_id, wiring.generation),
                "defaultMode": SSH_FILE_MODE,
            },
        },
    ]
    extra = mpi_environment(launch, wiring)
    containers = []
    for container in spec["containers"]:
        if container["name"] == CONTAINER_NAME:
            env = [e for e in container["env"] if e["name"] not in extra]
            env += [{"name": name, "value": value} for name, value in sorted(extra.items())]
            mount = {"name": SSH_VOLUME, "mountPath": SSH_DIR, "readOnly": True}
            container = {**container, "env": env, "volumeMounts": [*container["volumeMounts"], mount]}
        containers.append(container)
    spec["containers"] = containers
    return {**pod, "spec": spec}


async def mpi_wiring(db: Database, claimed: Mapping[str, Any], peers: list[Peer]) -> MpiWiring | None:
    """The wiring of a claimed attempt's job generation (``claim_attempt``'s row), or
    None when the job is not an MPI job. The keys are read with the launcher's own
    grant on ``launcher.job_ssh_keys``."""
    spec = JobSpec.model_validate(claimed["spec"])
    if spec.framework not in MPI_FRAMEWORKS:
        return None
    job_id, generation = str(claimed["job_id"]), int(claimed["generation"])
    row = await db.fetchrow(SQL.job_ssh_keys, job_id, generation)
    if row is None:
        raise MissingJobKeys(
            f"MPI job {job_id} has no ssh keys for generation {generation}; "
            "the launcher makes them with the generation's attempts"
        )
    worker = next(role for role in spec.tasks if role.name == WORKER_ROLE)
    ports = sorted(
        (peer.index, (peer.ports.get(SSH_PORT_LABEL) or [DEFAULT_SSH_PORT])[0])
        for peer in peers
        if peer.role == WORKER_ROLE
    )
    return MpiWiring(
        generation=generation,
        keys=JobSshKeys.from_row(dict(row)),
        worker_ports=tuple(ports),
        slots_per_worker=slots_per_worker(spec.mpi, worker.resources.gpu_devices),
    )
