"""The alert rules in force: the shipped defaults (``alert_rules.yaml`` beside this
module), the operator's file (``CORRAL_ALERTER_RULES_FILE``, re-read when it changes), and
an admin's overrides recorded through the API (``alerter.rule_overrides``), merged over the
file mapping by mapping.

The model is ``shared.alert_rules`` (the API validates overrides with it too). What is in
force is written to ``alerter.rules_in_force`` whenever it changes, with the reason an
edit was refused, so ``GET /api/v1/alert-rules`` shows the truth.

A runbook is a page name (``job-failed``: the shipped ``docs/runbooks/job-failed.md``) or a
URL. Names are resolved against ``CORRAL_ALERTER_RUNBOOK_BASE_URL`` when the rules come
into force, not in the file, so one rules file serves every site: the shipped pages as
the site's own API serves them, or a copy the site hosts elsewhere. An absolute URL (a
site's own wiki page) is kept as it is.
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import ValidationError

from shared.alert_rules import AlertRules, ConditionRules, EventRule, EventRules, merge
from shared.yamlconfig import WatchedFile

log = logging.getLogger(__name__)
RULES_PATH = Path(__file__).parent / "alert_rules.yaml"


@cache
def default_rules(path: Path = RULES_PATH) -> AlertRules:
    return AlertRules.model_validate(yaml.safe_load(path.read_text()))


def runbook_url(runbook: str, base_url: str) -> str:
    """A rule's runbook as a link: a page name after ``base_url`` (and one ``/``), an
    absolute URL (or nothing) as it is."""
    if not runbook or urlsplit(runbook).scheme:
        return runbook
    return f"{base_url.rstrip('/')}/{runbook.lstrip('/')}"


def with_runbook_links(rules: AlertRules, base_url: str) -> AlertRules:
    """``rules`` with every runbook page name made a link under ``base_url``."""

    def linked(rule: EventRule) -> EventRule:
        return rule.model_copy(update={"runbook": runbook_url(rule.runbook, base_url)})

    events = {name: linked(getattr(rules.events, name)) for name in EventRules.model_fields}
    conditions = {name: linked(getattr(rules.conditions, name)) for name in ConditionRules.model_fields}
    return rules.model_copy(
        update={
            "events": rules.events.model_copy(update=events),
            "conditions": rules.conditions.model_copy(update=conditions),
        }
    )


class RulesInForce:
    """The file's rules with the API's overrides over them; ``current`` is what rules use,
    its runbooks made links under ``runbook_base_url`` (names are left as they are when
    it is empty)."""

    def __init__(self, path: Path | None, runbook_base_url: str = "") -> None:
        self.file = WatchedFile(AlertRules, path, default_rules(), "alert rules")
        self.runbook_base_url = runbook_base_url
        self.overrides: dict[str, Any] = {}
        self.overrides_version = 0
        self.overrides_error: str | None = None
        self.current = self._linked(self.file.current)

    def _linked(self, rules: AlertRules) -> AlertRules:
        return with_runbook_links(rules, self.runbook_base_url) if self.runbook_base_url else rules

    @property
    def problem(self) -> str | None:
        return "\n".join(p for p in (self.file.error, self.overrides_error) if p) or None

    def refresh(self, overrides: dict[str, Any], version: int) -> bool:
        """Re-read the file if it changed and take the overrides given; True if the rules
        in force (or the problem reported with them) changed."""
        before = (self.current, self.problem, self.overrides_version)
        self.file.reload()
        self.overrides, self.overrides_version = overrides, version
        try:
            merged = AlertRules.model_validate(merge(self.file.current.model_dump(), overrides))
            self.current, self.overrides_error = self._linked(merged), None
        except ValidationError as exc:
            # Valid when recorded (the API checks); refused now only if the model changed.
            self.current = self._linked(self.file.current)
            self.overrides_error = f"overrides version {version} refused: {exc}"
            log.error("%s; the rules file alone is in force", self.overrides_error)
        changed = (self.current, self.problem, self.overrides_version) != before
        if changed:
            log.info("alert rules in force (overrides version %d)", version)
        return changed
