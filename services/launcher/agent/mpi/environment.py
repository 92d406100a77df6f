"""The variables an MPI job's tasks get besides the generic ones (pure functions).

``mpirun`` is pointed at the job's files rather than given flags, so a plain
``mpirun -np 8 python train.py`` works: Open MPI 4 reads ``OMPI_MCA_*`` (5 reads
``PRTE_MCA_*``), MPICH's Hydra reads ``HYDRA_*``. Open MPI leaves the loopback interface
out by default, so a job whose every task is on 127.0.0.1 (the local driver) is told to
use it.

Horovod's variables follow ``horovodrun``'s meaning, one rank per worker task: ranks are
the workers in index order; *local* ranks count the workers on one node; *cross* ranks
count the workers with one local rank, in the order their nodes first appear.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from services.launcher.agent.environment import Peer
from services.launcher.agent.mpi.ssh_files import SshPaths, workers_of
from shared.mpi_spec import LAUNCHER_ROLE, RENDEZVOUS_PORT_LABEL, WORKER_ROLE

# Not carried into the sessions a worker's sshd starts: sshd sets who the user is, and a
# rank that mpirun starts takes its rank from MPI, not from the worker task that hosts it
# (several ranks share one worker).
_NOT_FOR_SESSIONS = frozenset(
    {"HOME", "USER", "LOGNAME", "SHELL", "MAIL", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}
    | {"NODE_RANK", "CORRAL_SSHD_COMMAND"}
)
_NOT_FOR_SESSIONS_PREFIXES = ("HOROVOD_", "SSH_")


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def mpi_environment(
    paths: SshPaths, peers: list[Peer], role: str, index: int, sshd_binary: str | None
) -> dict[str, str]:
    """What points ``mpirun`` and ``ssh`` at the job's files; for a worker, also the
    command line of its sshd (``sshd_binary``: its path, needed for workers)."""
    # mpirun hands its MCA settings on to the daemon it starts on every worker, which
    # checks that the agent's program exists there: `ssh` does, the launcher's own files
    # (on its node, under its working directory) need not. The daemons start no others
    # (no tree spawn), so the config's path is only ever read on the launcher's node.
    ssh_agent = f"ssh -F {paths.config}"
    env = {
        "CORRAL_SSH_CONFIG": str(paths.config),
        "CORRAL_HOSTFILE": str(paths.hostfile),
        # Open MPI 4 (orte) and 5 (prte)
        "OMPI_MCA_orte_default_hostfile": str(paths.hostfile),
        "OMPI_MCA_plm_rsh_agent": ssh_agent,
        "OMPI_MCA_plm_rsh_no_tree_spawn": "1",
        # The hostfile's names are the ssh config's aliases, known to no resolver; Open
        # MPI 4's mpirun would ask DNS for each several times to learn whether it is this
        # host (a resolver that does not answer holds the start ten seconds a question;
        # one that knows such a name as this host would have its ranks started here,
        # outside the worker's sandbox). Every worker is reached through ssh.
        "OMPI_MCA_if_base_do_not_resolve": "1",
        "PRTE_MCA_prte_default_hostfile": str(paths.hostfile),
        "PRTE_MCA_plm_ssh_agent": ssh_agent,
        "PRTE_MCA_plm_ssh_no_tree_spawn": "1",
        # MPICH / Intel MPI (Hydra)
        "HYDRA_HOST_FILE": str(paths.hydra_hostfile),
        "HYDRA_LAUNCHER": "ssh",
        "HYDRA_LAUNCHER_EXEC": str(paths.ssh_wrapper),
    }
    if peers and all(is_loopback(p.host) for p in peers):
        for prefix in ("OMPI_MCA", "PRTE_MCA"):
            env[f"{prefix}_oob_tcp_if_include"] = "lo"
        env["OMPI_MCA_btl_tcp_if_include"] = "lo"
    if role == WORKER_ROLE:
        if sshd_binary is None:
            raise ValueError("a worker needs the sshd binary's path")
        env["CORRAL_SSHD_COMMAND"] = f"{sshd_binary} -D -e -f {paths.sshd_config(role, index)}"
    return env


def horovod_environment(peers: list[Peer], role: str, index: int) -> dict[str, str]:
    """Horovod's rank and rendezvous variables for one task (module docstring); the
    launcher gets the rendezvous and the size only."""
    workers = workers_of(peers)
    launcher = next((p for p in peers if p.role == LAUNCHER_ROLE), None)
    env = {"HOROVOD_SIZE": str(len(workers))}
    if launcher is not None and launcher.ports.get(RENDEZVOUS_PORT_LABEL):
        env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = launcher.host
        env["HOROVOD_GLOO_RENDEZVOUS_PORT"] = str(launcher.ports[RENDEZVOUS_PORT_LABEL][0])
    if role != WORKER_ROLE:
        return env
    me = next(w for w in workers if w.index == index)
    nodes = list(dict.fromkeys(w.node_id for w in workers))
    local_rank = {
        w.index: [v.index for v in workers if v.node_id == w.node_id].index(w.index) for w in workers
    }
    on_my_node = [w for w in workers if w.node_id == me.node_id]
    my_cross = sorted(
        (w for w in workers if local_rank[w.index] == local_rank[index]), key=lambda w: nodes.index(w.node_id)
    )
    env.update(
        {
            "HOROVOD_RANK": str(workers.index(me)),
            "HOROVOD_LOCAL_RANK": str(local_rank[index]),
            "HOROVOD_LOCAL_SIZE": str(len(on_my_node)),
            "HOROVOD_CROSS_RANK": str(my_cross.index(me)),
            "HOROVOD_CROSS_SIZE": str(len(my_cross)),
            # The node, not the address: the local driver's nodes all share 127.0.0.1, and
            # Horovod groups its local ranks by this name.
            "HOROVOD_HOSTNAME": me.node_id,
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
        }
    )
    return env


def session_environment(env: Mapping[str, str]) -> dict[str, str]:
    """What a worker's sshd sets in every session: the worker's own variables, less the
    user's identity (sshd's) and the task's own ranks (``_NOT_FOR_SESSIONS``)."""
    return {
        name: value
        for name, value in env.items()
        if name not in _NOT_FOR_SESSIONS and not name.startswith(_NOT_FOR_SESSIONS_PREFIXES)
    }
