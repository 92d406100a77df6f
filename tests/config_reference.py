"""The configuration reference, ``docs/configuration.md``, rendered from the code.

``python -m tests.config_reference`` (``make config-reference``) rewrites the page. Every
row of a settings group comes from its class: the variable from the group's
``env_prefix`` and the field's name, the type and bounds from the annotation and its
constraints, the default from the field, and the meaning from the field's attribute
docstring (every settings class sets ``use_attribute_docstrings``). So the page is only
ever as stale as the last time someone forgot to regenerate it, and
``tests/docs/test_configuration.py`` fails then, and for a field without a docstring.

A few variables are read outside any settings class: ``make up``'s own (the ports and
servers it starts), the CLI and SDK's, and the test suite's; and the agent sets some in a
task's environment. Those are listed below by hand, because there are few and the test
holds the list to the code: a ``CORRAL_*`` name anywhere in the source that the page does
not show fails it.

It lives beside the tests, not in ``shared`` or ``corral``, because it imports every
service's settings: ``shared`` may not import services, and the user-facing package has
no use for it.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import AliasChoices
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from tests.config_sections import FACTORY_DEFAULTS, NOT_VARIABLES, SECTIONS, Variable

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "configuration.md"
REGENERATE = "make config-reference (python -m tests.config_reference)"
NAME = re.compile(r"CORRAL_[A-Z0-9_]+")


def settings_groups() -> list[type[BaseSettings]]:
    return [group for section in SECTIONS for group in section.groups]


def variable(group: type[BaseSettings], field: str) -> str:
    """The variable a field is read from: its alias when it has one (a name of its own,
    outside the group's prefix), else the group's prefix and its name."""
    alias = group.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    if isinstance(alias, str):
        return alias
    return f"{group.model_config.get('env_prefix', '')}{field}".upper()


def _cell(text: str) -> str:
    """Markdown table cell: one line, RST literals as Markdown's, pipes escaped."""
    text = " ".join(inspect.cleandoc(text).split())
    return text.replace("``", "`").replace("|", "\\|")


def _number(value: float) -> str:
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(value)


def render_default(group: type[BaseSettings], name: str, info: FieldInfo) -> str:
    if info.default is PydanticUndefined:
        return FACTORY_DEFAULTS[(group, name)]
    value: Any = info.default
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        return f"`{_number(value)}`"
    if isinstance(value, tuple):
        return f"`{json.dumps([json.loads(_number(v)) for v in value])}`"
    if value == "":
        return "empty"
    return f"`{value}`"


_CHOICES = re.compile(r"^\^\(([a-z_|]+)\)\$$")
_TYPE_NAMES: dict[object, str] = {bool: "bool", int: "integer", float: "number", str: "string", Path: "path"}


def _one_of(choices: Iterable[object]) -> str:
    quoted = [f"`{choice}`" for choice in choices]
    return ", ".join(quoted[:-1]) + " or " + quoted[-1]


def render_type(info: FieldInfo) -> str:
    annotation: Any = info.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if get_origin(annotation) is Literal:
        return _one_of(get_args(annotation))
    if get_origin(annotation) is tuple:
        return "JSON list of numbers"
    described = _TYPE_NAMES[annotation]
    bounds: list[str] = []
    for constraint in info.metadata:
        match constraint:
            case annotated_types.Gt(gt=int() | float() as bound):
                bounds.append(f"> {_number(bound)}")
            case annotated_types.Ge(ge=int() | float() as bound):
                bounds.append(f"≥ {_number(bound)}")
            case annotated_types.Lt(lt=int() | float() as bound):
                bounds.append(f"< {_number(bound)}")
            case annotated_types.Le(le=int() | float() as bound):
                bounds.append(f"≤ {_number(bound)}")
            case annotated_types.MaxLen(max_length=bound):
                bounds.append(f"at most {bound} characters")
            case _ if getattr(constraint, "pattern", None):
                choices = _CHOICES.match(constraint.pattern)
                if choices:
                    return _one_of(choices.group(1).split("|"))
                bounds.append(f"matching `{constraint.pattern}`")
    return ", ".join([described, *bounds]).replace("|", "\\|")


def _source(group: type[BaseSettings]) -> str:
    return str(Path(inspect.getfile(group)).resolve().relative_to(ROOT))


def render_group(group: type[BaseSettings]) -> list[str]:
    prefix = group.model_config.get("env_prefix", "")
    heading = (
        f"`{prefix}*`" if prefix != "CORRAL_" else f"`{variable(group, next(iter(group.model_fields)))}`"
    )
    lines = [f"### {heading}", ""]
    if group.__doc__:
        lines += [f"{_cell(group.__doc__)} ({_source(group)}, `{group.__name__}`)", ""]
    lines += ["| variable | type | default | meaning |", "|---|---|---|---|"]
    for name, info in group.model_fields.items():
        if not info.description:
            raise ValueError(f"{group.__name__}.{name} has no description: give it an attribute docstring")
        row = (
            variable(group, name),
            render_type(info),
            render_default(group, name, info),
            _cell(info.description),
        )
        lines.append(f"| `{row[0]}` | {row[1]} | {row[2]} | {row[3]} |")
    return [*lines, ""]


def render_variables(variables: Iterable[Variable]) -> list[str]:
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for var in variables:
        lines.append(f"| `{var.name}` | {var.default or '—'} | {_cell(var.meaning)} |")
    return [*lines, ""]


def render() -> str:
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated from the settings classes by {REGENERATE}: edit those, not this page. -->",
        "",
        "Corral is configured by environment variables only (pydantic-settings); the defaults run",
        "one machine. Names are read without regard to case; a boolean is `true`/`false` (or",
        "`1`/`0`); a list is JSON (`[5, 300]`); a duration (`_s`) is in seconds and may have a",
        "fraction. A value that does not validate stops the process at start (the message",
        "names the group's class and the field). The most used ones are also in the README's",
        "Configuration section.",
        "",
    ]
    for section in SECTIONS:
        lines += [f"## {section.title}", "", section.intro, ""]
        for group in section.groups:
            lines += render_group(group)
        if section.variables:
            lines += render_variables(section.variables)
    lines += [
        "## Names that are not variables",
        "",
        "| name | what it is |",
        "|---|---|",
        *(f"| `{name}` | {what} |" for name, what in NOT_VARIABLES),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
