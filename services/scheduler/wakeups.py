"""What wakes the scheduler: every event it listens to just wakes the cycle.

The cycle reads the truth from Postgres, so these need no state, no idempotency records
and no acknowledged delivery: they are watched as they pass (``NatsBus.watch``, a plain
subscription), not consumed through a durable JetStream consumer, which would cost a
fetch and an ack per event, two events per job, at NATS and here. A wake-up missed (the
scheduler was disconnected, or is starting) is made up for by the periodic cycle
(``CORRAL_SCHEDULER_CYCLE_INTERVAL_S``); a repeated one only causes one more cycle.
"""

from __future__ import annotations

from shared.bus.streams import JOBS, NODES
from shared.events import JobCancelled, JobFailed, JobPreempted, JobSubmitted, JobSucceeded, subjects_of

# Jobs that may want GPUs (submitted, or back in the queue after a preemption: its GPUs
# free for whoever asked) and GPUs that came free; node changes (registered, drained,
# undrained, unreachable) change what can be placed.
WAKING_SUBJECTS = (
    *subjects_of(JobSubmitted, JobSucceeded, JobFailed, JobCancelled, JobPreempted),
    *NODES.subjects,
)
# Durable consumers by these names are deleted at start, where a deployment has them:
# nothing pulls from them, and a durable nobody pulls from stays on the server until
# deleted.
RETIRED_CONSUMERS = ((JOBS.name, "scheduler-jobs"), (NODES.name, "scheduler-nodes"))
