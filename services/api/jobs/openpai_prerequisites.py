"""OpenPAI's ``prerequisites``: images, scripts, data and outputs, and the ``$script``,
``$data`` and ``$output`` a task role's commands may refer to. Part of the OpenPAI
mapping (``openpai.py``).

=========================  ===========================================================
OpenPAI                    Corral
=========================  ===========================================================
``dockerimage``            ``tasks[].image``: its ``uri``. ``auth`` is refused: the
                           nodes pull with their own registry credentials
``script`` (a role's       ``tasks[].fetch``: a git repository fetched at ``version``
``script``)                (an archive: .tar.gz, .tgz, .tar, .zip, unpacked; one file such
                           as ``train.py``, copied) into ``script_NAME`` in the working
                           directory before the commands run: the directory OpenPAI's own
                           examples use
``data`` (a role's         ``tasks[].fetch``: each URI fetched into ``data_NAME/`` (as
``data``)                  ``wget -P`` would put it)
``output`` (a role's       ``outputs``: kept as the artifact ``JOB:NAME`` when the job
``output``)                succeeds; ``<% $output.uri %>`` is its directory
                           (``$CORRAL_OUTPUT_DIR/NAME``)
=========================  ===========================================================

References resolve as OpenPAI resolves them, to the prerequisite's fields as written
(``<% $script.uri %>``, ``<% $script.version %>``, ``<% $data.uri[0] %>``, ``.name``),
except ``<% $output.uri %>``, which is where the output is kept. A URI whose scheme
Corral cannot fetch (``hdfs://``, ``s3://``, none at all) is refused at submit, naming
the scheme: never dropped. The one difference from OpenPAI: a script is already in
``script_NAME`` when the commands start, so a command that clones it there itself must
clone elsewhere, or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field

from shared.fetch_spec import FETCH_SCHEMES, uri_scheme

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
MAX_DATA_URIS = 15  # with the script, a task's 16 fetches
Loc = tuple[str | int, ...]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RegistryAuth(_Model):
    username: str | None = None
    password: str | None = None
    passward: str | None = None  # (the misspelling OpenPAI's own protocol document has)
    registryuri: str | None = None


class Prerequisite(_Model):
    name: str = Field(min_length=1, max_length=255)
    type: Literal["dockerimage", "script", "data", "output"]
    uri: str | list[str]
    protocolVersion: Literal[2, "2"] | None = None
    version: str | int | float | None = None
    contributor: str | None = None
    description: str | None = None
    auth: RegistryAuth | None = None

    @property
    def uri_list(self) -> list[str]:
        return list(self.uri) if isinstance(self.uri, list) else [self.uri]


class PrerequisiteInvalid(ValueError):
    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc


def _refuse(loc: Loc, message: str) -> NoReturn:
    raise PrerequisiteInvalid(loc, message)


@dataclass(frozen=True)
class Prerequisites:
    """The document's prerequisites by name, checked."""

    by_name: dict[str, tuple[int, Prerequisite]]

    @classmethod
    def check(cls, items: list[Prerequisite]) -> Prerequisites:
        by_name: dict[str, tuple[int, Prerequisite]] = {}
        for index, item in enumerate(items):
            at: Loc = ("prerequisites", index)
            if item.name in by_name:
                _refuse((*at, "name"), f"a prerequisite named {item.name!r} is given twice")
            by_name[item.name] = (index, item)
            if item.auth is not None:
                _refuse(
                    (*at, "auth"),
                    "Corral's nodes pull images with their own registry credentials; remove auth "
                    "(a job carries no registry password)",
                )
            if isinstance(item.uri, list) and item.type != "data":
                _refuse((*at, "uri"), f"a {item.type} has one URI; only data may list several")
            if item.type in ("script", "data"):
                _check_fetchable(item, at)
            if item.type == "script" and isinstance(item.version, float):
                _refuse(
                    (*at, "version"),
                    f"YAML reads this version as the number {item.version!r}, which may not be the tag"
                    " meant (1.10 reads as 1.1); quote it: version: '1.10'",
                )
            if item.type == "output" and _unreachable(item.uri_list[0]):
                _refuse(
                    (*at, "uri"),
                    f"Corral cannot write {uri_scheme(item.uri_list[0])}:// URIs; it keeps a job's output "
                    "as an artifact (JOB:NAME) and <% $output.uri %> is its directory: give a file://, "
                    "http(s):// or relative uri, or copy the output there in the commands",
                )
        return cls(by_name)

    def named(self, name: str, kind: str, at: Loc) -> Prerequisite:
        found = self.by_name.get(name)
        if found is None or found[1].type != kind:
            _refuse(at, f"no prerequisite of type {kind} is named {name!r}")
        return found[1]


def _unreachable(uri: str) -> bool:
    scheme = uri_scheme(uri)
    return bool(scheme) and scheme not in FETCH_SCHEMES


def _check_fetchable(item: Prerequisite, at: Loc) -> None:
    uris = item.uri_list
    if not uris:
        _refuse((*at, "uri"), "give at least one URI")
    if len(uris) > MAX_DATA_URIS:
        _refuse((*at, "uri"), f"at most {MAX_DATA_URIS} URIs per data prerequisite")
    for position, uri in enumerate(uris):
        scheme = uri_scheme(uri)
        if scheme not in FETCH_SCHEMES:
            where = (*at, "uri", position) if isinstance(item.uri, list) else (*at, "uri")
            _refuse(
                where,
                f"Corral cannot fetch {scheme + '://' if scheme else 'scheme-less'} URIs (it fetches "
                f"{', '.join(sorted(s + '://' for s in FETCH_SCHEMES))}); copy the {item.type} where "
                "those reach, mount it with teamwise_storage, or fetch it in the commands and drop "
                f"the {item.type} prerequisite",
            )


def version_text(value: str | int | float | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def fetches_of(script: Prerequisite | None, data: Prerequisite | None) -> list[dict[str, Any]]:
    """The native ``fetch`` list of a task role that names ``script`` and ``data``."""
    fetches: list[dict[str, Any]] = []
    if script is not None:
        uri = script.uri_list[0]
        kind = _script_kind(uri)
        path = f"script_{script.name}"
        item: dict[str, Any] = {
            "uri": uri,
            "kind": kind,
            "path": path if kind != "file" else f"{path}/{_base(uri)}",
        }
        version = version_text(script.version)
        if kind == "git" and version not in (None, "latest"):
            item["version"] = version
        fetches.append(item)
    if data is not None:
        for uri in data.uri_list:
            fetches.append({"uri": uri, "kind": "file", "path": f"data_{data.name}/{_base(uri)}"})
    return fetches


def _base(uri: str) -> str:
    return PurePosixPath(uri.split("://", 1)[-1].split("?")[0].rstrip("/")).name or "data"


def _script_kind(uri: str) -> str:
    """A repository (``.git``, or no suffix: a forge's project page), an archive, or one
    file (``train.py``, ``run.sh``)."""
    lowered = uri.lower().split("?")[0].rstrip("/")
    if lowered.endswith(ARCHIVE_SUFFIXES):
        return "archive"
    suffix = PurePosixPath(lowered.split("://", 1)[-1]).suffix
    return "file" if suffix and suffix != ".git" and "/" in lowered.split("://", 1)[-1] else "git"


def reference_root(item: Prerequisite, output_dir: str | None = None) -> dict[str, Any]:
    """What ``$script``, ``$data`` or ``$output`` is to the commands' references."""
    root: dict[str, Any] = {"name": item.name, "uri": item.uri, "type": item.type}
    if item.version is not None:
        root["version"] = version_text(item.version)
    if item.description is not None:
        root["description"] = item.description
    if output_dir is not None:
        root["uri"] = output_dir
    return root
