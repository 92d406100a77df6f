"""Every alert rule has a runbook page and every page a rule; an alert's runbook link is
a page the API serves."""

from __future__ import annotations

from pathlib import Path

import httpx
import yaml

from services.alerter.rule_config import RULES_PATH, RulesInForce, default_rules, runbook_url
from services.alerter.rules import draft_for
from services.api.app import create_app
from services.api.docs_pages import RUNBOOKS
from services.api.settings import Settings
from shared.alert_rules import ConditionRules, EventRule, EventRules
from shared.db.pool import Database
from shared.events import JobFailed
from shared.events.jobs import JobEndedData
from shared.service import Health

BASE = "http://corral.test/docs/runbooks/"


def rules_by_name(base_url: str = "") -> dict[str, EventRule]:
    rules = RulesInForce(None, base_url).current
    return {
        **{name: getattr(rules.events, name) for name in EventRules.model_fields},
        **{name: getattr(rules.conditions, name) for name in ConditionRules.model_fields},
    }


def test_every_shipped_rule_names_a_page_and_every_page_is_named_by_a_rule() -> None:
    shipped = yaml.safe_load(RULES_PATH.read_text())
    assert {*shipped["events"], *shipped["conditions"]} == set(rules_by_name()), (
        "every rule of the model is in the shipped alert_rules.yaml"
    )
    pages = {rule: rule_.runbook for rule, rule_ in rules_by_name().items()}
    without = {rule: page for rule, page in pages.items() if not (RUNBOOKS / f"{page}.md").is_file()}
    assert not without, f"rules whose runbook is no page of docs/runbooks: {without}"
    unnamed = {path.stem for path in RUNBOOKS.glob("*.md")} - {"README"} - set(pages.values())
    assert not unnamed, f"runbook pages no rule links to: {unnamed}"
    index = (RUNBOOKS / "README.md").read_text()
    assert [page for page in pages.values() if f"({page}.md)" not in index] == []


def test_a_page_name_becomes_a_link_under_the_base_and_a_url_stays_as_it_is(tmp_path: Path) -> None:
    assert runbook_url("job-failed", BASE) == f"{BASE}job-failed"
    assert (
        runbook_url("job-failed", "https://ops.example/runbooks") == "https://ops.example/runbooks/job-failed"
    )
    assert runbook_url("https://wiki.example/failed", BASE) == "https://wiki.example/failed"
    assert runbook_url("", BASE) == ""
    assert default_rules().events.job_failed.runbook == "job-failed"  # the file names pages

    own = tmp_path / "alert-rules.yaml"
    own.write_text("events:\n  job_failed: {runbook: 'https://wiki.example/failed'}\n")
    rules = RulesInForce(own, BASE)
    assert rules.current.events.job_failed.runbook == "https://wiki.example/failed"
    assert rules.refresh({"events": {"node_unreachable": {"runbook": "node-unreachable"}}}, version=1)
    assert rules.current.events.node_unreachable.runbook == f"{BASE}node-unreachable"  # an override's too
    assert rules.current.events.job_failed.runbook == "https://wiki.example/failed"


async def test_every_alerts_runbook_link_is_a_page_the_api_serves_without_a_token(db: Database) -> None:
    failed = JobFailed(
        source="corral/launcher",
        subject="job-1",
        data=JobEndedData(job_id="job-1", generation=1, reason="exit 3"),
    )
    draft = draft_for(failed, RulesInForce(None, BASE).current.events)
    assert draft is not None
    links = {draft.annotations["runbook_url"]} | {
        rule.extra_annotations()["runbook_url"] for rule in rules_by_name(BASE).values()
    }
    assert len(links) == len(rules_by_name())
    assert all(link.startswith(BASE) for link in links)
    app = create_app(db, Health("api", {}), Settings())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://corral.test"
    ) as http:
        for link in sorted(links):
            page = await http.get(link)
            assert page.status_code == 200, (link, page.text)
            assert page.headers["content-type"] == "text/markdown; charset=utf-8"
            assert page.text == (RUNBOOKS / f"{link.removeprefix(BASE)}.md").read_text()
        index = await http.get("/docs/runbooks/")
        assert index.status_code == 200
        assert index.text.startswith("# Runbooks")
        assert (await http.get("/docs/runbooks/job-failed.md")).text == (
            RUNBOOKS / "job-failed.md"
        ).read_text()

        unknown = await http.get("/docs/runbooks/no-such-alert")
        assert unknown.status_code == 404
        assert "job-failed" in unknown.json()["detail"]  # says which pages there are
        for outside in (
            "..%2Fconfiguration.md",
            "configuration",
            "..%2F..%2Fpyproject.toml",
            "%2Fetc%2Fpasswd",
        ):
            refused = await http.get(f"/docs/runbooks/{outside}")
            assert refused.status_code in (404, 422), outside
            assert "Configuration reference" not in refused.text
            assert "[project]" not in refused.text
