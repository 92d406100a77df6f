"""Completion rules over a generation's attempts (pure code)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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
