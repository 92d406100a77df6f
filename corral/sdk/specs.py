"""Reading a job spec from a file: JSON or YAML (YAML is a superset of JSON, so one safe
loader reads both). ``-`` reads standard input. The API validates the spec; this only
checks that the file holds a mapping."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from corral.sdk.errors import CorralError


class SpecError(CorralError):
    """The file could not be read, or does not hold a job spec mapping."""


def load_job_spec(path: str | Path) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_text()
        document = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SpecError(f"cannot read a job spec from {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise SpecError(f"{path} holds no job spec: expected a mapping with name and tasks")
    return document
