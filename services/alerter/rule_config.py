"""The alert rules in force: the shipped defaults (``alert_rules.yaml`` beside this
module), the operator's file (``CORRAL_ALERTER_RULES_FILE``, re-read when it changes), and
an admin's overrides recorded through the API (``alerter.rule_overrides``), merged over the
file mapping by mapping.

The model is ``shared.alert_rules`` (the API validates overrides with it too). What is in
force is written to ``alerter.rules_in_force`` whenever it changes, with the reason an
edit was refused, so ``GET /api/v1/alert-rules`` shows the truth.
"""

from __future__ import annotations

import logging
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from shared.alert_rules import AlertRules, merge
from shared.yamlconfig import WatchedFile

log = logging.getLogger(__name__)
RULES_PATH = Path(__file__).parent / "alert_rules.yaml"


@cache
def default_rules(path: Path = RULES_PATH) -> AlertRules:
    return AlertRules.model_validate(yaml.safe_load(path.read_text()))


class RulesInForce:
    """The file's rules with the API's overrides over them; ``current`` is what rules use."""

    def __init__(self, path: Path | None) -> None:
        self.file = WatchedFile(AlertRules, path, default_rules(), "alert rules")
        self.overrides: dict[str, Any] = {}
        self.overrides_version = 0
        self.overrides_error: str | None = None
        self.current = self.file.current

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
            self.current = AlertRules.model_validate(merge(self.file.current.model_dump(), overrides))
            self.overrides_error = None
        except ValidationError as exc:
            # Valid when recorded (the API checks); refused now only if the model changed.
            self.current = self.file.current
            self.overrides_error = f"overrides version {version} refused: {exc}"
            log.error("%s; the rules file alone is in force", self.overrides_error)
        changed = (self.current, self.problem, self.overrides_version) != before
        if changed:
            log.info("alert rules in force (overrides version %d)", version)
        return changed
