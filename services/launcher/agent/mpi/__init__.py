"""The node agent's side of MPI and Horovod jobs (``framework: mpi`` or ``horovod``,
``shared/mpi_spec.py``): what a launcher or worker task needs besides its command.

- ``ssh_files.py``: the texts — ssh client config, pinned host key, hostfiles, each
  worker's ``sshd_config`` (with the worker's environment for the ranks it hosts);
- ``writing.py``: puts them under the job's ``.ssh/``, owned by the task's uid;
- ``environment.py``: the variables that point ``mpirun`` (Open MPI, MPICH's Hydra) at
  them, and Horovod's ranks and rendezvous (pure functions);
- ``barrier.py``: the launcher starts only once every worker's ``sshd`` answers;
- ``wiring.py``: ``ready_mpi_task``, the one call the agent makes before a spawn.
"""

from services.launcher.agent.mpi.wiring import ready_mpi_task

__all__ = ["ready_mpi_task"]
