"""The environment a task process sees.

Built from a small allow-list of the agent's own variables (never all of them: the
agent's environment holds the database URL with its password), then the job's env,
then what Corral sets — which the job cannot override, because the GPU pinning must be
what the scheduler placed.
"""

from __future__ import annotations

import os

from shared.jobs import TaskRole

_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL")


def task_environment(
    role: TaskRole,
    *,
    job_id: str,
    job_name: str,
    task_index: int,
    attempt_id: str,
    attempt_no: int,
    gpu_indices: list[int],
) -> dict[str, str]:
    env = {name: os.environ[name] for name in _INHERITED if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(role.env)
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpu_indices),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CORRAL_JOB_ID": job_id,
            "CORRAL_JOB_NAME": job_name,
            "CORRAL_TASK_ROLE": role.name,
            "CORRAL_TASK_INDEX": str(task_index),
            "CORRAL_ATTEMPT_ID": attempt_id,
            "CORRAL_ATTEMPT": str(attempt_no),
        }
    )
    return env
