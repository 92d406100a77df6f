"""A manifest: the files of a directory, each with its size and sha256, sorted by path.

The manifest is the artifact's identity: an artifact's ``sha256`` is the sha256 of its
manifest's canonical JSON (no spaces, keys sorted, entries sorted by path), so two
artifacts of the same files agree whoever made them, and the blobs it names are
verified one by one wherever they land.

Walking a directory never follows a symbolic link and keeps only regular files: a task
writes its output directory, and a link it leaves there (to ``/etc/shadow``, to another
job's inputs) must not be read by the agent as root. Paths are relative, '/'-separated,
and checked again wherever a manifest arrives from elsewhere (``check_entry_path``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

SHA256_PATTERN = r"^[0-9a-f]{64}$"
_SHA256_RE = re.compile(SHA256_PATTERN)
# Room for deep trees; a single name is still limited by the filesystem (255 bytes).
MAX_PATH_CHARS = 4096
READ_BYTES = 1024 * 1024


def check_entry_path(path: str) -> str:
    """A manifest path: relative, '/'-separated, no empty, '.' or '..' parts, no NUL."""
    parts = path.split("/")
    if (
        not path
        or len(path) > MAX_PATH_CHARS
        or "\x00" in path
        or path.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise ValueError(f"{path!r} is not a relative path inside its directory")
    return path


def check_sha256(value: str) -> str:
    if not _SHA256_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a sha256 (64 lower-case hex digits)")
    return value


class ManifestEntry(BaseModel):
    """One regular file of an artifact."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    size: Annotated[int, Field(ge=0)]
    sha256: Annotated[str, Field(pattern=SHA256_PATTERN)]

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        return check_entry_path(value)


MANIFEST = TypeAdapter(list[ManifestEntry])


def canonical(entries: Iterable[ManifestEntry]) -> list[ManifestEntry]:
    """Sorted by path; a path twice is refused (it would name two contents)."""
    ordered = sorted(entries, key=lambda entry: entry.path)
    for before, after in itertools.pairwise(ordered):
        if before.path == after.path:
            raise ValueError(f"the manifest names {before.path!r} twice")
    return ordered


def to_json(entries: Iterable[ManifestEntry]) -> list[dict[str, object]]:
    return [entry.model_dump() for entry in canonical(entries)]


def canonical_json(entries: Iterable[ManifestEntry]) -> bytes:
    """The manifest's canonical JSON (no spaces, keys sorted, entries sorted by path)."""
    return json.dumps(to_json(entries), sort_keys=True, separators=(",", ":")).encode()


def manifest_sha256(entries: Iterable[ManifestEntry]) -> str:
    """The sha256 of the manifest's canonical JSON: the artifact's identity."""
    return hashlib.sha256(canonical_json(entries)).hexdigest()


def parse_canonical(data: bytes, sha256: str) -> list[ManifestEntry]:
    """A manifest sent as a blob: valid, and canonical (what ``sha256`` names)."""
    entries = MANIFEST.validate_json(data)
    if manifest_sha256(entries) != sha256:
        raise ValueError(f"manifest {sha256} is not in its canonical form (sorted, compact JSON)")
    return entries


def total_size(entries: Iterable[ManifestEntry]) -> int:
    return sum(entry.size for entry in entries)


def file_sha256(path: Path) -> str:
    """The sha256 of a regular file, read without following a final symbolic link."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(READ_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class Walk:
    """A directory's regular files (relative path → absolute path) and what was passed
    over (links, devices, sockets: ``skipped``)."""

    files: dict[str, Path] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    size: int = 0


def walk(root: Path) -> Walk:
    """Every regular file under ``root``, never following a link. A missing ``root`` is
    an empty directory (a task that wrote nothing)."""
    found = Walk()
    if not root.is_dir() or root.is_symlink():
        return found
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(directory)
        for name in [*dirnames, *filenames]:
            path = base / name
            info = path.lstat()
            relative = path.relative_to(root).as_posix()
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                found.skipped.append(relative)
                continue
            found.files[relative] = path
            found.size += info.st_size
    return found


def build(files: dict[str, Path]) -> list[ManifestEntry]:
    """The manifest of ``walk``'s files: each read once for its sha256 (blocking: call
    it in a thread)."""
    entries = [
        ManifestEntry(path=relative, size=path.lstat().st_size, sha256=file_sha256(path))
        for relative, path in files.items()
    ]
    return canonical(entries)


def under(entries: Iterable[ManifestEntry], prefix: str) -> list[ManifestEntry]:
    """The entries at or below ``prefix``, their paths made relative to it (a file
    named by ``prefix`` itself keeps its own name)."""
    kept = []
    for entry in entries:
        if entry.path == prefix:
            kept.append(entry.model_copy(update={"path": entry.path.rsplit("/", 1)[-1]}))
        elif entry.path.startswith(prefix + "/"):
            kept.append(entry.model_copy(update={"path": entry.path[len(prefix) + 1 :]}))
    return kept
