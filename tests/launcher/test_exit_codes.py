"""The exit-code table: data that decides which failures are retried."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.launcher.exit_codes import TaskEnd, classify, default_table
from shared.jobs import ExitRule


def test_the_table_loads_and_every_rule_is_valid() -> None:
    rules = default_table()
    assert len(rules) >= 10
    assert {r.classification for r in rules} == {"transient", "permanent", "unknown"}


@pytest.mark.parametrize(
    ("end", "classification", "reason"),
    [
        (TaskEnd(127), "permanent", "command not found"),
        (TaskEnd(2), "permanent", "bad arguments"),
        (
            TaskEnd(1, log_tail="RuntimeError: CUDA out of memory. Tried to allocate"),
            "permanent",
            "CUDA out of memory",
        ),
        (TaskEnd(None, platform="node_lost"), "transient", "lost"),
        (TaskEnd(None, platform="preempted"), "transient", "preempted"),
        (TaskEnd(None, platform="ecc_uncorrectable"), "transient", "ECC"),
        (TaskEnd(None, platform="max_runtime_exceeded"), "permanent", "max_runtime_s"),
        (TaskEnd(137), "unknown", "SIGKILL"),
        (TaskEnd(None, signal=9), "unknown", "SIGKILL"),
        (TaskEnd(75), "transient", "EX_TEMPFAIL"),
        (TaskEnd(137, platform="oom_killed"), "permanent", "memory limit"),
        (TaskEnd(None, platform="node_rejected"), "transient", "rejected"),
        (TaskEnd(3), "unknown", "exited with code 3"),
    ],
)
def test_classification(end: TaskEnd, classification: str, reason: str) -> None:
    verdict = classify(end)
    assert verdict.classification == classification
    assert reason in verdict.reason


def test_a_jobs_own_rules_come_first() -> None:
    mine = [ExitRule(exit_codes=[127], classification="transient", reason="our launcher script races")]
    assert classify(TaskEnd(127), mine).classification == "transient"
    assert classify(TaskEnd(127)).classification == "permanent"


@pytest.mark.parametrize(
    ("rule", "complaint"),
    [
        ({"classification": "transient"}, "at least one of"),
        ({"log_pattern": "(unclosed", "classification": "permanent"}, "not a valid regular expression"),
        ({"exit_codes": [300], "classification": "permanent"}, "less than or equal to 255"),
        ({"exit_codes": [1], "classification": "maybe"}, "transient"),
    ],
)
def test_bad_rules_are_rejected_with_the_reason(rule: dict[str, object], complaint: str) -> None:
    with pytest.raises(ValidationError, match=complaint):
        ExitRule.model_validate(rule)
