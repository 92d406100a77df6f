"""The artifact store's contract, against both kinds: a directory, and S3 (a real moto
server). And the manifests that describe what a store holds."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.artifacts.manifest import (
    ManifestEntry,
    build,
    canonical,
    check_entry_path,
    manifest_sha256,
    under,
    walk,
)
from shared.artifacts.settings import ArtifactSettings
from shared.artifacts.store import ArtifactStore, DirectoryStore, StoreError, blob_key, open_store
from tests.artifact_s3 import moto_s3


@pytest.fixture(scope="module")
def s3_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArtifactSettings]:
    with moto_s3(tmp_path_factory.mktemp("moto")) as settings:
        yield settings


@pytest.fixture(params=["dir", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "dir":
        return open_store(ArtifactSettings(dir=tmp_path / "store"), tmp_path)
    settings: ArtifactSettings = request.getfixturevalue("s3_settings")
    return open_store(settings, tmp_path)


def _blob(tmp_path: Path, data: bytes) -> tuple[str, Path]:
    sha256 = hashlib.sha256(data).hexdigest()
    path = tmp_path / f"source-{sha256[:8]}"
    path.write_bytes(data)
    return sha256, path


async def test_a_blob_put_is_there_whole_and_in_ranges(store: ArtifactStore, tmp_path: Path) -> None:
    data = os.urandom(300_000)
    sha256, source = _blob(tmp_path, data)
    assert not await store.has(sha256)
    assert await store.size(sha256) is None
    await store.put(sha256, source)
    await store.put(sha256, source)  # again: nothing changes
    assert source.read_bytes() == data  # the caller's file is left as it was
    assert await store.has(sha256)
    assert await store.size(sha256) == len(data)
    assert await store.read(sha256, 0, len(data)) == data
    assert await store.read(sha256, 1000, 500) == data[1000:1500]
    assert await store.read(sha256, len(data) - 10, 500) == data[-10:]
    assert await store.read(sha256, len(data), 500) == b""


async def test_an_empty_blob_round_trips(store: ArtifactStore, tmp_path: Path) -> None:
    sha256, source = _blob(tmp_path, b"")
    await store.put(sha256, source)
    assert await store.size(sha256) == 0
    assert await store.read(sha256, 0, 100) == b""


async def test_a_missing_blob_is_not_read(store: ArtifactStore) -> None:
    with pytest.raises(StoreError):
        await store.read("ab" * 32, 0, 10)


async def test_the_directory_store_keeps_blobs_under_their_key_read_only(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "store")
    sha256, source = _blob(tmp_path, b"weights")
    await store.put(sha256, source)
    path = tmp_path / "store" / "blobs" / "sha256" / sha256[:2] / sha256
    assert path.read_bytes() == b"weights"
    assert path.stat().st_mode & 0o777 == 0o444
    assert [p.name for p in path.parent.iterdir()] == [sha256]  # no temporary left behind


def test_a_blob_key_is_a_sha256() -> None:
    assert blob_key("0f" * 32) == f"blobs/sha256/0f/{'0f' * 32}"
    with pytest.raises(ValueError, match="not a sha256"):
        blob_key("../../etc/passwd")


@pytest.mark.parametrize("path", ["", "/etc/passwd", "a/../../b", "./a", "a//b", "a/", "..", "a\x00b"])
def test_a_manifest_path_must_stay_inside_its_directory(path: str) -> None:
    with pytest.raises(ValueError, match="not a relative path"):
        check_entry_path(path)


def test_a_walk_keeps_regular_files_only_and_follows_no_link(tmp_path: Path) -> None:
    root = tmp_path / "out"
    (root / "model").mkdir(parents=True)
    (root / "model" / "weights.bin").write_bytes(b"w" * 10)
    (root / "metrics.json").write_text("{}")
    (root / "secret").symlink_to("/etc/shadow")
    (root / "elsewhere").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(root / "pipe")
    walked = walk(root)
    assert sorted(walked.files) == ["metrics.json", "model/weights.bin"]
    assert sorted(walked.skipped) == ["elsewhere", "pipe", "secret"]
    assert walked.size == 12
    entries = build(walked.files)
    assert [(e.path, e.size) for e in entries] == [("metrics.json", 2), ("model/weights.bin", 10)]
    assert entries[1].sha256 == hashlib.sha256(b"w" * 10).hexdigest()
    assert walk(tmp_path / "absent").files == {}


def test_a_manifest_sha256_is_of_its_canonical_form() -> None:
    a = ManifestEntry(path="b.txt", size=1, sha256="1" * 64)
    b = ManifestEntry(path="a/c.txt", size=2, sha256="2" * 64)
    assert manifest_sha256([a, b]) == manifest_sha256([b, a])
    expected = (
        '[{"path":"a/c.txt","sha256":"'
        + "2" * 64
        + '","size":2},{"path":"b.txt","sha256":"'
        + "1" * 64
        + '","size":1}]'
    )
    assert manifest_sha256([a, b]) == hashlib.sha256(expected.encode()).hexdigest()
    with pytest.raises(ValueError, match="twice"):
        canonical([a, a])


def test_an_output_path_selects_its_files_relative_to_it() -> None:
    entries = [
        ManifestEntry(path="model/w.bin", size=1, sha256="1" * 64),
        ManifestEntry(path="model.txt", size=1, sha256="2" * 64),
        ManifestEntry(path="preds/part-0.csv", size=1, sha256="3" * 64),
    ]
    assert [e.path for e in under(entries, "model")] == ["w.bin"]
    assert [e.path for e in under(entries, "model.txt")] == ["model.txt"]
    assert under(entries, "nothing") == []
