"""The capacity reasons a job that did not fit waits for, as a sentence a user can act on."""

from __future__ import annotations

from services.scheduler.model import PendingJob, PendingReason


def why_waiting(
    job: PendingJob,
    free_now: int,
    free_at_start: int,
    largest_ready: int,
    largest_unready: int,
    queued_ahead: bool = False,
) -> tuple[PendingReason, str]:
    """The one capacity reason a job that did not fit waits, and a sentence that says it.

    ``Priority`` (as Slurm's): the GPUs it needs go to jobs ahead of it first, either
    this cycle (``free_at_start`` had them) or as they come free (``queued_ahead``: a
    job ahead of it, asking no more GPUs of the same type, waits too). Only the first
    of a queue waits for ``InsufficientGPUs``. So a reason holds still while the queue
    moves, rather than flipping with whether a GPU happened to be free when a cycle
    began (each flip rewrote the row of every job behind)."""
    need = job.gpus
    widest = job.widest
    if widest > largest_ready or (job.topology == "single_node" and need > largest_ready):
        wants = need if job.topology == "single_node" and need > largest_ready else widest
        what = "the job needs" if wants == need and job.topology == "single_node" else "a task needs"
        if wants <= largest_unready:
            return "NodesUnhealthy", (
                f"{what} {wants} GPUs on one node; only nodes that are drained or unreachable"
                f" have that many (the largest ready node has {largest_ready})"
            )
        return (
            "GangDoesNotFit",
            f"{what} {wants} GPUs on one node; the largest ready node has {largest_ready}",
        )
    if need > free_now:
        if need <= free_at_start or queued_ahead:
            return (
                "Priority",
                f"needs {need} GPUs; jobs ahead of it in the queue get them first ({free_now} free now)",
            )
        return "InsufficientGPUs", f"needs {need} GPUs; {free_now} are free on ready nodes"
    shape = " + ".join(f"{t.instances}x{t.gpus}" for t in job.tasks if t.gpus)
    return "Fragmented", (
        f"needs {need} GPUs as {shape} and {free_now} are free, but spread so that the gang does not"
        f" fit (a task needs {widest} on one node)"
    )


def _share_of(job: PendingJob) -> str:
    shares = sorted({t.gpu_milli for t in job.tasks if t.gpu_milli})
    return " and ".join(f"{milli / 1000:g}" for milli in shares)


def no_shared_pool(job: PendingJob) -> str:
    """Why a job asking for a share waits where no ready node shares its GPUs."""
    kind = f" {job.gpu_type}" if job.gpu_type else ""
    return (
        f"asks for {_share_of(job)} of a{kind} GPU, but no ready node pool shares its GPUs in"
        " fractions; a fraction runs only on a pool whose sharing is timeslice, mps or hami (a mig"
        " pool offers its MIG devices as GPU types of their own). Ask for a whole GPU, or for such a"
        " pool"
    )


def share_shortage(job: PendingJob) -> str:
    """Why a job asking for a share waits where pools share, but none has room."""
    return (
        f"asks for {_share_of(job)} of a GPU; no shared GPU has that much room left and no sharing"
        " node has a free GPU to share"
    )
