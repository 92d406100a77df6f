"""When is a job done? Completion rules over the attempts of one generation (pure code).

Per task role (OpenPAI's ``completion``): the role has *failed* once ``min_failed``
instances failed (default 1: the first failure fails the job), and has *succeeded* once
``min_succeeded`` instances succeeded (default: all of them). The job fails when any
role failed and succeeds when every role succeeded; either way the tasks still running
are stopped, and the outcome is final once every attempt has ended. An attempt that
Corral itself stopped (to end the gang, or to cancel) is neither a success nor a failure.
An MPI job is decided by its launcher alone (``_evaluate_mpi``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from shared.jobs import JobSpec
from shared.mpi_spec import LAUNCHER_ROLE, MPI_FRAMEWORKS

LIVE_STATES = frozenset({"ASSIGNED", "STARTING", "RUNNING"})


@dataclass(frozen=True)
class AttemptOutcome:
    id: str
    task_role: str
    task_index: int
    node_id: str
    state: str
    exit_code: int | None
    classification: str | None
    reason: str
    stop_requested: bool
    finished_at: datetime | None

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "EXITED" and self.exit_code == 0

    @property
    def failed(self) -> bool:
        return not self.live and not self.succeeded and not self.stop_requested


class Verdict(Enum):
    CONTINUE = "continue"
    SUCCEED = "succeed"
    FAIL = "fail"


@dataclass(frozen=True)
class Evaluation:
    verdict: Verdict
    # The failure that decided a FAIL verdict (the first to finish), for the retry decision.
    decisive: AttemptOutcome | None
    # Attempts still live: stopped before the outcome is final.
    live: tuple[AttemptOutcome, ...]

    @property
    def final(self) -> bool:
        return self.verdict is not Verdict.CONTINUE and not self.live


def _by_end(attempts: Iterable[AttemptOutcome]) -> list[AttemptOutcome]:
    return sorted(attempts, key=lambda a: (a.finished_at is None, a.finished_at, a.id))


def evaluate(spec: JobSpec, attempts: list[AttemptOutcome]) -> Evaluation:
    live = tuple(a for a in attempts if a.live)
    if spec.framework in MPI_FRAMEWORKS:
        return _evaluate_mpi(attempts, live)
    failures = _by_end(a for a in attempts if a.failed)
    for role in spec.tasks:
        failed = sum(1 for a in failures if a.task_role == role.name)
        if failed >= role.completion.min_failed:
            decisive = next(a for a in failures if a.task_role == role.name)
            return Evaluation(Verdict.FAIL, decisive, live)
    for role in spec.tasks:
        needed = role.completion.min_succeeded or role.instances
        succeeded = sum(1 for a in attempts if a.task_role == role.name and a.succeeded)
        if succeeded < needed:
            if not live and attempts:
                # Nothing left running and not enough successes: e.g. tasks Corral
                # stopped without a failure of their own. Call it a failure.
                return Evaluation(Verdict.FAIL, failures[0] if failures else None, live)
            return Evaluation(Verdict.CONTINUE, None, live)
    return Evaluation(Verdict.SUCCEED, None, live)


def _evaluate_mpi(attempts: list[AttemptOutcome], live: tuple[AttemptOutcome, ...]) -> Evaluation:
    """An MPI job's outcome is its launcher's: it succeeds when the launcher exits 0 (the
    workers, which serve ``mpirun`` and never end by themselves, are then stopped) and
    fails when the launcher fails. A worker that ends while the launcher has not yet
    succeeded, even with status 0, has taken its ranks with it: that fails the attempt."""
    launchers = [a for a in attempts if a.task_role == LAUNCHER_ROLE]
    if any(a.succeeded for a in launchers):
        return Evaluation(Verdict.SUCCEED, None, live)
    ended = _by_end(a for a in attempts if not a.live and not a.stop_requested)
    if ended:
        return Evaluation(Verdict.FAIL, ended[0], live)
    if not live and attempts:
        return Evaluation(Verdict.FAIL, None, live)
    return Evaluation(Verdict.CONTINUE, None, live)


def retry_delay_s(retries_before: int, backoff_s: float, max_backoff_s: float) -> float:
    """Exponential backoff: ``backoff_s``, doubling per earlier retry, capped."""
    return float(min(max_backoff_s, backoff_s * 2.0 ** min(retries_before, 30)))
