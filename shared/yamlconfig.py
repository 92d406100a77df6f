"""Reading a YAML configuration file into a model, with errors that name line and field,
and keeping the last good version in force while the file is edited."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the line and field."""


def _line_of(document: yaml.Node, loc: tuple[int | str, ...]) -> int:
    """The 1-based line of the YAML node at a pydantic error location (for a missing
    field, the line of the mapping that lacks it)."""
    node: yaml.Node = document
    for part in loc:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            child = next((v for k, v in node.value if str(k.value) == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
        if child is None:
            break
        node = child
    return node.start_mark.line + 1


def parse_yaml(model: type[M], text: str, source: str) -> M:
    try:
        document = yaml.compose(text, Loader=yaml.SafeLoader)
        raw: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    try:
        return model.model_validate(raw or {})
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"]) or "(top level)"
            where = f"line {_line_of(document, error['loc'])}, " if document is not None else ""
            problems.append(f"{source}: {where}{field}: {error['msg']}")
        raise ConfigError("\n".join(problems)) from exc


class WatchedFile(Generic[M]):
    """The configuration in force, re-read from its file when the file changes."""

    def __init__(self, model: type[M], path: Path | None, default: M, what: str) -> None:
        self.model = model
        self.path = path
        self.current = default
        self._default = default
        self.error: str | None = None
        self._what = what
        self._digest = b""
        self.reload()

    def reload(self) -> bool:
        """Pick up a changed file; True if a new version is now in force."""
        if self.path is None:
            return False
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            self.error = f"{self.path}: cannot be read: {exc}"
            log.error("%s; the %s in force stay", self.error, self._what)
            return False
        digest = hashlib.sha256(text.encode()).digest()
        if digest == self._digest:
            return False
        self._digest = digest
        if not text.strip():
            self.current, self.error = self._default, None  # no file (yet): the defaults
            return True
        try:
            parsed = parse_yaml(self.model, text, str(self.path))
        except ConfigError as exc:
            self.error = str(exc)
            log.error("%s refused; the %s in force stay:\n%s", self.path, self._what, exc)
            return False
        self.current, self.error = parsed, None
        log.info("%s in force (%s)", self._what, self.path)
        return True
