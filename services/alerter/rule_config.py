"""The alert rules in force: the shipped defaults (``alert_rules.yaml`` beside this
module), the operator's file (``CORRAL_ALERTER_RULES_FILE``, re-read when it changes), and
an admin's overrides recorded through the API, merged over the file.

The model is ``shared.alert_rules`` (the API validates overrides with it too).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

from shared.alert_rules import AlertRules

RULES_PATH = Path(__file__).parent / "alert_rules.yaml"


@cache
def default_rules(path: Path = RULES_PATH) -> AlertRules:
    return AlertRules.model_validate(yaml.safe_load(path.read_text()))
