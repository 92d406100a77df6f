"""The launcher's Prometheus metrics (served on its health port with the shared ones).

Recorded where a job's or an attempt's state changes, so each is counted once per
change (a fenced update or the handlers' idempotency record makes a repeat change
nothing). A task's start and end, and most jobs' ends, are recorded by whoever reports
them (``reporting.py``): the node agents, which serve these on their health ports too,
or on Kubernetes the launcher's runner.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)

LAUNCH_LATENCY = Histogram(
    "corral_launch_latency_seconds",
    "From a job's placement to its first task running (attempts created, agents claimed and spawned them).",
    buckets=_LATENCY_BUCKETS,
)
JOB_START_LATENCY = Histogram(
    "corral_job_start_latency_seconds",
    "From a job's submit to its first task running, queueing included.",
    buckets=(*_LATENCY_BUCKETS, 900.0, 3600.0, 14400.0, 86400.0),
)
JOBS_ENDED = Counter("corral_jobs_ended", "Jobs that reached an end state, by state.", ["state"])
TASK_EXITS = Counter(
    "corral_task_exits", "Task attempts that ended, by exit classification.", ["classification"]
)
# Each task holding a share of a GPU, while it runs (node agents: gpu_share/watch.py).
GPU_SHARE_USED = Gauge(
    "corral_agent_gpu_share_used_bytes",
    "GPU memory the processes of a task holding a share of the GPU use, as last read.",
    ["job", "attempt", "gpu"],
)
GPU_SHARE_LIMIT = Gauge(
    "corral_agent_gpu_share_limit_bytes",
    "The GPU memory a task holding a share of the GPU may use (its gpu_memory_mb, or its fraction).",
    ["job", "attempt", "gpu"],
)
