"""The node agent's side of ``ssh`` for a generic job (``shared/ssh_spec.py``): OpenPAI's
``jobssh``, ``sshbarrier`` and ``userssh``, built on the MPI wiring's files and writer
(``services/launcher/agent/mpi/``).

- ``texts.py``: the ssh config naming every task ``ROLE-INDEX``, the ``ssh`` wrapper on
  the task's PATH, the wrapped command (sshd beside it, the barrier before it);
- ``wiring.py``: ``ready_job_ssh``, the one call the agent makes before a spawn.
"""

from services.launcher.agent.job_ssh.wiring import ready_job_ssh

__all__ = ["ready_job_ssh"]
