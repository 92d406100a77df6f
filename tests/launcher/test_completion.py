"""Completion rules over a generation's attempts (pure code)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from services.launcher.completion import AttemptOutcome, Verdict, evaluate, retry_delay_s
from shared.jobs import JobSpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _spec(instances: int = 2, **completion: int) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "j",
            "tasks": [{"name": "w", "instances": instances, "command": "x", "completion": completion}],
        }
    )


def _attempt(
    index: int, state: str, exit_code: int | None = None, *, stopped: bool = False, at: int = 0
) -> AttemptOutcome:
    ended = state not in ("ASSIGNED", "STARTING", "RUNNING")
    return AttemptOutcome(
        id=f"a{index}",
        task_role="w",
        task_index=index,
        node_id="n",
        state=state,
        exit_code=exit_code,
        classification="unknown" if ended else None,
        reason="",
        stop_requested=stopped,
        finished_at=T0 + timedelta(seconds=at) if ended else None,
    )


def test_running_gang_continues() -> None:
    result = evaluate(_spec(), [_attempt(0, "RUNNING"), _attempt(1, "EXITED", 0)])
    assert result.verdict is Verdict.CONTINUE


def test_first_failure_fails_the_job_and_stops_the_rest() -> None:
    result = evaluate(_spec(), [_attempt(0, "RUNNING"), _attempt(1, "EXITED", 4)])
    assert result.verdict is Verdict.FAIL
    assert result.decisive is not None
    assert result.decisive.task_index == 1
    assert [a.task_index for a in result.live] == [0]
    assert not result.final


def test_the_earliest_failure_is_decisive() -> None:
    result = evaluate(
        _spec(3, min_failed=2),
        [_attempt(0, "EXITED", 5, at=9), _attempt(1, "EXITED", 6, at=3), _attempt(2, "RUNNING")],
    )
    assert result.verdict is Verdict.FAIL
    assert result.decisive is not None
    assert result.decisive.exit_code == 6


def test_min_failed_tolerates_some_failures() -> None:
    result = evaluate(
        _spec(3, min_failed=2), [_attempt(0, "EXITED", 1), _attempt(1, "RUNNING"), _attempt(2, "RUNNING")]
    )
    assert result.verdict is Verdict.CONTINUE


def test_min_succeeded_ends_the_job_early() -> None:
    result = evaluate(
        _spec(3, min_succeeded=1), [_attempt(0, "EXITED", 0), _attempt(1, "RUNNING"), _attempt(2, "RUNNING")]
    )
    assert result.verdict is Verdict.SUCCEED
    assert len(result.live) == 2


def test_tasks_corral_stopped_are_not_failures() -> None:
    attempts = [_attempt(0, "EXITED", 0), _attempt(1, "EXITED", None, stopped=True)]
    result = evaluate(_spec(2, min_succeeded=1), attempts)
    assert result.verdict is Verdict.SUCCEED
    assert result.final


def test_backoff_doubles_and_is_capped() -> None:
    assert [retry_delay_s(n, 10, 60) for n in range(5)] == [10, 20, 40, 60, 60]


def test_a_transition_belongs_to_one_service() -> None:
    import pytest

    from shared.jobs import JobState, check_transition

    check_transition(JobState.RUNNING, JobState.SUCCEEDED, "launcher")
    with pytest.raises(RuntimeError, match="belongs to scheduler"):
        check_transition(JobState.PENDING, JobState.SCHEDULED, "launcher")
    with pytest.raises(RuntimeError, match="belongs to nobody"):
        check_transition(JobState.SUCCEEDED, JobState.RUNNING, "launcher")


def _mpi_attempt(
    role: str, index: int, state: str, exit_code: int | None = None, **kw: Any
) -> AttemptOutcome:
    base = _attempt(index, state, exit_code, **kw)
    return replace(base, id=f"{role}{index}", task_role=role)


MPI_SPEC = JobSpec.model_validate(
    {
        "name": "j",
        "framework": "mpi",
        "tasks": [{"name": "launcher", "command": "mpirun x"}, {"name": "worker", "instances": 2}],
    }
)


def test_an_mpi_job_succeeds_with_its_launcher_and_stops_the_workers() -> None:
    attempts = [
        _mpi_attempt("launcher", 0, "EXITED", 0),
        _mpi_attempt("worker", 0, "RUNNING"),
        _mpi_attempt("worker", 1, "RUNNING"),
    ]
    result = evaluate(MPI_SPEC, attempts)
    assert result.verdict is Verdict.SUCCEED
    assert [a.id for a in result.live] == ["worker0", "worker1"]
    stopped = [replace(a, state="EXITED", exit_code=143, stop_requested=True) for a in attempts[1:]]
    assert evaluate(MPI_SPEC, [attempts[0], *stopped]).final


def test_a_worker_that_ends_while_the_launcher_runs_fails_the_attempt_even_with_status_0() -> None:
    for code in (0, 137):
        result = evaluate(
            MPI_SPEC,
            [
                _mpi_attempt("launcher", 0, "RUNNING"),
                _mpi_attempt("worker", 0, "RUNNING"),
                _mpi_attempt("worker", 1, "EXITED", code, at=2),
            ],
        )
        assert result.verdict is Verdict.FAIL
        assert result.decisive is not None
        assert result.decisive.id == "worker1"


def test_an_mpi_job_fails_with_its_launcher_and_runs_while_it_runs() -> None:
    running = [_mpi_attempt("launcher", 0, "RUNNING"), _mpi_attempt("worker", 0, "RUNNING")]
    assert evaluate(MPI_SPEC, running).verdict is Verdict.CONTINUE
    failed = evaluate(MPI_SPEC, [_mpi_attempt("launcher", 0, "EXITED", 1), running[1]])
    assert failed.verdict is Verdict.FAIL
    assert failed.decisive is not None
    assert failed.decisive.task_role == "launcher"
