"""The alert rules file: the shipped defaults, validation naming line and field, hot reload."""

from __future__ import annotations

from pathlib import Path

from services.alerter.rule_config import RulesInForce, default_rules
from services.alerter.rules import draft_for
from shared.alert_rules import AlertRules
from shared.events import JobFailed
from shared.events.jobs import JobEndedData
from shared.yamlconfig import WatchedFile


def test_the_shipped_rules_load_and_give_severities_and_runbooks() -> None:
    rules = default_rules()
    assert rules.conditions.gpu_idle.enabled
    assert rules.conditions.gpu_idle.below_pct == 5
    failed = JobFailed(
        source="corral/launcher",
        subject="job-1",
        data=JobEndedData(job_id="job-1", generation=1, reason="exit 3"),
    )
    draft = draft_for(failed, RulesInForce(None, "https://ops.example/runbooks").current.events)
    assert draft is not None
    assert draft.severity == "warning"
    assert draft.annotations == {"runbook_url": "https://ops.example/runbooks/job-failed"}


def test_a_bad_rules_file_is_refused_and_a_good_one_replaces_the_rules(tmp_path: Path) -> None:
    path = tmp_path / "alert-rules.yaml"
    live = WatchedFile(AlertRules, path, default_rules(), "alert rules")
    assert live.current == default_rules()  # no file: the shipped rules
    path.write_text(
        "events:\n  job_failed: {severity: critical}\nconditions:\n  gpu_idle: {below_pct: 500}\n"
    )
    assert not live.reload()
    assert live.error is not None
    assert "line 4, conditions.gpu_idle.below_pct" in live.error
    assert live.current == default_rules()
    path.write_text(
        "events:\n  job_failed: {severity: critical}\n"
        "conditions:\n  gpu_idle: {enabled: false, severity: info}\n"
    )
    assert live.reload()
    assert live.current.events.job_failed.severity == "critical"
    assert not live.current.conditions.gpu_idle.enabled


def test_overrides_merge_over_the_file_and_a_refused_edit_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "alert-rules.yaml"
    path.write_text("events:\n  job_failed: {severity: critical, runbook: 'https://wiki/failed'}\n")
    rules = RulesInForce(path)
    assert rules.refresh({"events": {"job_failed": {"labels": {"team": "ml"}}}}, version=1)
    job_failed = rules.current.events.job_failed
    assert (job_failed.severity, job_failed.runbook, job_failed.labels) == (
        "critical",
        "https://wiki/failed",
        {"team": "ml"},
    )
    assert rules.problem is None
    path.write_text("events:\n  job_failed: {severity: loud}\n")
    assert rules.refresh(rules.overrides, version=1)  # the problem is news
    assert "line 2, events.job_failed.severity" in str(rules.problem)
    assert rules.current.events.job_failed.labels == {"team": "ml"}  # what was in force stays
    assert not rules.refresh(rules.overrides, version=1)  # nothing new
