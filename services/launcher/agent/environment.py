"""The environment a task process sees.

Built from a small allow-list of the agent's own variables (never all of them: the
agent's environment holds the database URL with its password), then the job's env,
then what Corral sets — which the job cannot override, because the GPU pinning and the
rendezvous must be what Corral placed.

Distributed jobs get what PyTorch's launchers set (``MASTER_ADDR``, ``MASTER_PORT``,
``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``) and what
OpenPAI sets (``PAI_TASK_ROLE_LIST``, ``PAI_HOST_IP_<role>_<i>``,
``PAI_PORT_LIST_<role>_<i>_<label>``, ...). Ranks follow the spec: roles in the order
given, instances in index order; the master is the first task of the first role.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from shared.jobs import JobSpec

_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL")
MASTER_PORT_LABEL = "master"


@dataclass(frozen=True)
class Peer:
    """One task instance of the job's current generation, as placed."""

    role: str
    index: int
    node_id: str
    host: str
    ports: dict[str, list[int]]


def _env_token(name: str) -> str:
    """Role names may hold '-', which shell variable names may not."""
    return name.replace("-", "_")


def distributed_environment(spec: JobSpec, role: str, index: int, peers: list[Peer]) -> dict[str, str]:
    order = {r.name: position for position, r in enumerate(spec.tasks)}
    ranked = sorted(peers, key=lambda p: (order.get(p.role, len(order)), p.index))
    me = next(p for p in ranked if (p.role, p.index) == (role, index))
    master = ranked[0]
    nodes: list[str] = []
    for peer in ranked:
        if peer.node_id not in nodes:
            nodes.append(peer.node_id)
    on_my_node = [p for p in ranked if p.node_id == me.node_id]
    env = {
        "MASTER_ADDR": master.host,
        "MASTER_PORT": str(master.ports.get(MASTER_PORT_LABEL, [0])[0]),
        "WORLD_SIZE": str(len(ranked)),
        "RANK": str(ranked.index(me)),
        "LOCAL_RANK": str(on_my_node.index(me)),
        "LOCAL_WORLD_SIZE": str(len(on_my_node)),
        "NODE_RANK": str(nodes.index(me.node_id)),
        "PAI_TASK_ROLE_LIST": ",".join(r.name for r in spec.tasks),
        "PAI_CURRENT_TASK_ROLE_NAME": role,
        "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": str(index),
        "PAI_TASK_ROLE_COUNT": str(len(spec.tasks)),
    }
    for r in spec.tasks:
        env[f"PAI_TASK_ROLE_TASK_COUNT_{_env_token(r.name)}"] = str(r.instances)
    for peer in ranked:
        token = f"{_env_token(peer.role)}_{peer.index}"
        env[f"PAI_HOST_IP_{token}"] = peer.host
        for label, ports in peer.ports.items():
            env[f"PAI_PORT_LIST_{token}_{label}"] = ",".join(str(p) for p in ports)
    return env


def port_environment(job_id: str, role: str, index: int, ports: dict[str, list[int]]) -> dict[str, str]:
    """For each port label: the task's first port of it, and the path the API's proxy
    reaches it at (an app that must know its base URL is given this)."""
    env: dict[str, str] = {}
    for label, numbers in ports.items():
        token = _env_token(label).upper()
        if numbers:
            env[f"CORRAL_PORT_{token}"] = str(numbers[0])
        env[f"CORRAL_PROXY_PATH_{token}"] = f"/proxy/{job_id}/{role}-{index}/{label}/"
    return env


def artifact_environment(
    input_dir: Path, output_dir: Path | None, inputs: list[tuple[str, str]]
) -> dict[str, str]:
    """Where the task finds its inputs and leaves its outputs. ``inputs``: (reference as
    pinned, e.g. ``mnist@4`` or ``job-…:model``; where it landed under ``input_dir``).

    ``CORRAL_MODEL_DIR_<NAME>`` is each model input's version directory (``-`` in the
    name becomes ``_``, upper-cased), so a task reads ``$CORRAL_MODEL_DIR_MNIST``
    whichever version was pinned."""
    env = {"CORRAL_INPUT_DIR": str(input_dir)}
    if output_dir is not None:
        env["CORRAL_OUTPUT_DIR"] = str(output_dir)
    for ref, path in inputs:
        if "@" in ref:
            name = ref.split("@", 1)[0]
            env[f"CORRAL_MODEL_DIR_{_env_token(name).upper()}"] = str(input_dir / path)
    return env


def task_environment(
    spec: JobSpec,
    *,
    job_id: str,
    role: str,
    task_index: int,
    attempt_id: str,
    attempt_no: int,
    gpu_indices: list[int],
    peers: list[Peer],
    inherit_host: bool = True,
    secrets: dict[str, str] | None = None,
) -> dict[str, str]:
    """``inherit_host``: start from the allow-list of this process's variables (a task run
    on this host); a container (Kubernetes) keeps its image's own instead. ``secrets``:
    an OpenPAI job's ``CORRAL_SECRET_*`` variables, which its stored command refers to
    (the values live in ``api.job_secrets`` only, never in the spec: services/api/jobs/openpai.py)."""
    task_role = next(r for r in spec.tasks if r.name == role)
    env: dict[str, str] = {}
    if inherit_host:
        env = {name: os.environ[name] for name in _INHERITED if name in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(task_role.env)
    env.update(secrets or {})
    env.update(distributed_environment(spec, role, task_index, peers))
    me = next((p for p in peers if (p.role, p.index) == (role, task_index)), None)
    if me is not None:
        env.update(port_environment(job_id, role, task_index, me.ports))
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpu_indices),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CORRAL_JOB_ID": job_id,
            "CORRAL_JOB_NAME": spec.name,
            "CORRAL_TASK_ROLE": role,
            "CORRAL_TASK_INDEX": str(task_index),
            "CORRAL_ATTEMPT_ID": attempt_id,
            "CORRAL_ATTEMPT": str(attempt_no),
        }
    )
    return env
