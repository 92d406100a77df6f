"""docs/configuration.md holds every setting, as the code has it.

The page is rendered from the settings classes (tests/config_reference.py); these tests
fail when it is stale, when a setting has no description to render, and when a
``CORRAL_*`` name appears in the source or is read by a test without a place on the page.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path

from pydantic_settings import BaseSettings

from tests.config_reference import NAME, PAGE, REGENERATE, ROOT, render, settings_groups

# Where Corral's own names live: the code, its deployment and its other docs.
SOURCE_ROOTS = ("shared", "services", "corral", "bench", "deploy", "docs")
SOURCE_FILES = ("README.md", "Makefile", "pyproject.toml")
SOURCE_SUFFIXES = {".py", ".sql", ".yaml", ".yml", ".md", ".toml", ".env", ".sh", ".c", ".json", ".cfg", ""}
READ_IN_TESTS = re.compile(
    r"""(?:environ\.get|environ\[|getenv|environ\.setdefault)\(?\s*["'](CORRAL_[A-Z0-9_]+)"""
)


def _settings_classes() -> set[type[BaseSettings]]:
    """Every settings group of shared/ and services/, found by importing every settings.py."""
    for path in [*ROOT.glob("shared/**/settings.py"), *ROOT.glob("services/**/settings.py")]:
        importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
    found: set[type[BaseSettings]] = set()
    pending = list(BaseSettings.__subclasses__())
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        if cls.__module__.startswith(("shared.", "services.")) and cls.model_config.get("env_prefix"):
            found.add(cls)
    return found


def _source_files() -> Iterator[Path]:
    for root in SOURCE_ROOTS:
        for path in sorted((ROOT / root).rglob("*")):
            if (
                path.is_file()
                and path.suffix in SOURCE_SUFFIXES
                and path != PAGE
                and "__pycache__" not in path.parts
            ):
                yield path
    for name in SOURCE_FILES:
        yield ROOT / name


# A family of names on the page, written with a placeholder: ``CORRAL_PORT_<LABEL>``.
FAMILY = re.compile(r"\b(CORRAL_[A-Z0-9_]+_)<[A-Z_]+>")


def _on_page(name: str, page_names: set[str], families: tuple[str, ...] = ()) -> bool:
    """A name is on the page, or is a prefix (``CORRAL_AGENT_``) of one that is, or one
    of a family the page names (``CORRAL_PORT_DATA`` of ``CORRAL_PORT_<LABEL>``)."""
    return (
        name in page_names
        or (name.endswith("_") and any(n.startswith(name) for n in page_names))
        or name.startswith(families)
    )


def test_every_settings_group_is_on_the_page_and_every_setting_described() -> None:
    groups = _settings_classes()
    assert groups, "no settings classes found: the discovery is broken"
    assert groups == set(settings_groups()), (
        f"settings groups missing from tests/config_sections.py SECTIONS: "
        f"{sorted(c.__name__ for c in groups - set(settings_groups()))}"
    )
    undescribed = [
        f"{cls.__module__}.{cls.__name__}.{name}"
        for cls in groups
        for name, info in cls.model_fields.items()
        if not (info.description or "").strip()
    ]
    assert not undescribed, (
        f"settings without a description (give each an attribute docstring): {undescribed}"
    )


def test_the_committed_page_is_current() -> None:
    assert PAGE.read_text() == render(), f"{PAGE.relative_to(ROOT)} is stale: run {REGENERATE}"


def test_every_corral_name_in_the_source_is_on_the_page() -> None:
    page = PAGE.read_text()
    page_names = set(NAME.findall(page))
    families = tuple(FAMILY.findall(page))
    missing: dict[str, str] = {}
    for path in _source_files():
        for name in NAME.findall(path.read_text(errors="replace")):
            if not _on_page(name, page_names, families):
                missing.setdefault(name, str(path.relative_to(ROOT)))
    assert not missing, (
        f"CORRAL_* names on no row of {PAGE.relative_to(ROOT)} (name: first file): {missing}; add them "
        f"to a settings class or to tests/config_sections.py, then run {REGENERATE}"
    )


def test_every_variable_a_test_reads_is_on_the_page() -> None:
    page_names = set(NAME.findall(PAGE.read_text()))
    read = {
        name: str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for name in READ_IN_TESTS.findall(path.read_text())
    }
    missing = {name: where for name, where in read.items() if name not in page_names}
    assert not missing, f"variables the tests read that {PAGE.relative_to(ROOT)} does not list: {missing}"


def test_the_checks_see_a_missing_name() -> None:
    """The scan is not vacuous: it finds names in the source, and refuses one the page lacks."""
    page_names = set(NAME.findall(PAGE.read_text()))
    assert "CORRAL_AGENT_LEASE_S" in page_names
    assert _on_page("CORRAL_AGENT_", page_names)
    assert not _on_page("CORRAL_NO_SUCH_SETTING", page_names)
    assert not _on_page("CORRAL_NO_SUCH_", page_names)
    families = tuple(FAMILY.findall(PAGE.read_text()))
    assert "CORRAL_PORT_" in families
    assert _on_page("CORRAL_PORT_JUPYTER", page_names, families)
    assert not _on_page("CORRAL_PORTS", page_names, families)
