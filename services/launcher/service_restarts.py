"""A ``kind: service`` job never ends on its own: every end that is not a cancel puts it
back in the queue, after a delay that grows while it keeps crashing.

This is Kubernetes' CrashLoopBackOff for replicas: the delay starts at ``retry.backoff_s``
and doubles per quick crash up to ``retry.max_backoff_s``; an attempt that ran a while (at
least ten first delays, or a minute) was healthy, so the next crash starts over at the
first delay. ``retries`` holds the crash loop's count, the step the delay is computed from,
which is why it goes back to zero after a healthy run; a replica's total restarts are its
attempts (``GET /api/v1/services/{name}``). The exit-code table does not apply: a service
that exits 0, or with a "permanent" code, is restarted all the same, for nothing but its
owner (scale to zero, delete) stops a service. A cancel and a preemption are decided
before this is asked (``outcomes.py``).
"""

from __future__ import annotations

from services.launcher.completion import AttemptOutcome, retry_delay_s
from services.launcher.repository import SQL
from shared.db.pool import Connection
from shared.jobs import JobSpec

# A run at least this long (or ten first delays, if less) resets the crash loop.
HEALTHY_RUN_S = 60.0


def is_service(spec: JobSpec) -> bool:
    return spec.kind == "service"


async def next_restart(
    conn: Connection, spec: JobSpec, crashes_before: int, ended: AttemptOutcome | None
) -> tuple[int, float]:
    """The crash loop's count after this end, and the delay before the replica starts again.
    An end that was the platform's fault (``transient``: its node was lost) is no crash of
    the replica's: it starts again after the first delay and the count stays."""
    if ended is not None and ended.classification == "transient":
        return crashes_before, retry_delay_s(0, spec.retry.backoff_s, spec.retry.max_backoff_s)
    ran_s = 0.0
    if ended is not None:
        ran_s = float(await conn.fetchval(SQL.attempt_ran_s, ended.id) or 0.0)
    if ran_s >= min(HEALTHY_RUN_S, 10 * spec.retry.backoff_s):
        crashes_before = 0
    delay = retry_delay_s(crashes_before, spec.retry.backoff_s, spec.retry.max_backoff_s)
    return crashes_before + 1, delay


def restart_reason(ended_reason: str, crashes: int, delay_s: float) -> str:
    """``restarting: task main-0 exited with code 1 (3 crashes in a row); next start in 4 s``:
    what the replica's status shows while it waits (``not_before`` says when exactly)."""
    in_a_row = f" ({crashes} crashes in a row)" if crashes > 1 else ""
    return f"restarting: {ended_reason}{in_a_row}; next start in {delay_s:g} s"
