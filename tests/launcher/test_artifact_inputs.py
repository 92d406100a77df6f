"""Inputs down: a job's inputs land verified and read-only at their paths, the same for
every task, and a sandboxed task cannot change them (``artifact_stand.py``: real
Postgres, NATS, processes and sandbox)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from services.launcher.agent.sandbox.sandbox import Sandbox
from shared.artifacts.manifest import build, manifest_sha256, to_json, walk
from shared.artifacts.store import DirectoryStore
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from shared.ids import new_artifact_id
from tests.launcher.artifact_stand import (
    artifact_server,
    artifacts_of,
    decided,
    ended,
    job_spec,
    node,
    placed,
    submitted,
)

WEIGHTS = b"\x00\x01weights" * 1000


async def _stored_artifact(db: Database, store: DirectoryStore, tmp_path: Path) -> tuple[str, str]:
    """A succeeded job's ``model`` output, its blobs in the store: (job id, artifact id)."""
    source = tmp_path / "producer"
    (source / "sub").mkdir(parents=True)
    (source / "weights.bin").write_bytes(WEIGHTS)
    (source / "sub" / "config.json").write_text('{"layers": 2}')
    walked = walk(source)
    entries = build(walked.files)
    for entry in entries:
        await store.put(entry.sha256, walked.files[entry.path])
    producer = await submitted(db, job_spec("true"))
    artifact_id = new_artifact_id()
    await db.execute(
        "INSERT INTO launcher.artifacts (id, job_id, output, manifest, files, size_bytes, sha256)"
        " VALUES ($1, $2, 'model', $3, $4, $5, $6)",
        artifact_id,
        producer,
        to_json(entries),
        len(entries),
        sum(e.size for e in entries),
        manifest_sha256(entries),
    )
    return producer, artifact_id


async def _consumer(db: Database, command: str, producer: str, artifact_id: str, **extra: Any) -> str:
    """A job reading the producer's model, pinned as submission pins it (api.job_inputs)."""
    ref = f"{producer}:model"
    spec = job_spec(command, inputs=[{"artifact": ref}], **extra)
    job_id = await submitted(db, spec)
    await db.execute(
        "INSERT INTO api.job_inputs (job_id, position, ref, artifact_id, path) VALUES ($1, 0, $2, $3, $4)",
        job_id,
        ref,
        artifact_id,
        f"artifacts/{producer}/model",
    )
    return job_id


TRIES = """
set -u
M="$CORRAL_INPUT_DIR/artifacts/{producer}/model"
R="$CORRAL_OUTPUT_DIR/report"
mkdir -p "$R"
sha256sum "$M/weights.bin" | cut -d' ' -f1 > "$R/read"
try() {{ if ( eval "$2" ) 2>/dev/null; then echo done > "$R/$1"; else echo refused > "$R/$1"; fi; }}
try append "echo x >> '$M/weights.bin'"
try chmod "chmod 666 '$M/weights.bin'"
try create "touch '$M/new'"
try remove "rm -f '$M/weights.bin' && [ ! -e '$M/weights.bin' ]"
try rename "mv '$M/sub' '$M/other'"
"""


async def test_inputs_land_verified_and_a_sandboxed_task_cannot_change_them(
    db: Database, bus: NatsBus, tmp_path: Path, sandbox: Sandbox
) -> None:
    async with artifact_server(db, bus, tmp_path) as store:
        producer, artifact_id = await _stored_artifact(db, store, tmp_path)
        job_id = await _consumer(
            db,
            TRIES.format(producer=producer),
            producer,
            artifact_id,
            outputs=[{"name": "report", "path": "report"}],
        )
        async with node(db, bus, tmp_path, "gpu-1", sandbox=sandbox) as agent:
            [attempt_id] = await placed(db, job_id, ["gpu-1"])
            await agent.start_attempt(attempt_id)
            attempt = await ended(db, attempt_id)
        assert attempt["exit_code"] == 0, attempt
        assert (await decided(db, job_id))["state"] == "SUCCEEDED"
        report = {
            entry["path"]: await store.read(entry["sha256"], 0, 1000)
            for entry in (await artifacts_of(db, job_id))["report"]["manifest"]
        }
    assert report["read"].decode().strip() == hashlib.sha256(WEIGHTS).hexdigest()
    for attempt_to in ("append", "chmod", "create", "remove", "rename"):
        assert report[attempt_to] == b"refused\n", attempt_to
    model = tmp_path / "gpu-1" / "work" / job_id / "inputs" / "artifacts" / producer / "model"
    weights = (model / "weights.bin").lstat()
    assert (model / "weights.bin").read_bytes() == WEIGHTS
    assert (weights.st_uid, stat.S_IMODE(weights.st_mode)) == (0, 0o444)
    assert stat.S_IMODE(model.lstat().st_mode) == 0o555
    assert (model / "sub" / "config.json").read_text() == '{"layers": 2}'


async def test_a_jobs_tasks_share_one_verified_copy_from_the_nodes_cache(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    """Two tasks of a job, then a second attempt: the inputs are fetched once into the
    cache, and each file under $CORRAL_INPUT_DIR is the cache's own (a hard link)."""
    command = 'test "$(cat $CORRAL_INPUT_DIR/artifacts/{producer}/model/weights.bin | wc -c)" = {size}'
    async with artifact_server(db, bus, tmp_path) as store:
        producer, artifact_id = await _stored_artifact(db, store, tmp_path)
        job_id = await _consumer(
            db, command.format(producer=producer, size=len(WEIGHTS)), producer, artifact_id
        )
        async with node(db, bus, tmp_path, "gpu-1") as agent:
            for generation in (1, 2):
                attempt_ids = await placed(db, job_id, ["gpu-1"], generation=generation)
                await agent.reconcile()
                for attempt_id in attempt_ids:
                    assert (await ended(db, attempt_id))["exit_code"] == 0
    cache = tmp_path / "gpu-1" / "work" / ".input-cache"
    sha = hashlib.sha256(WEIGHTS).hexdigest()
    cached = cache / sha[:2] / sha
    placed_file = (
        tmp_path / "gpu-1" / "work" / job_id / "inputs" / "artifacts" / producer / "model" / "weights.bin"
    )
    assert os.path.samestat(cached.lstat(), placed_file.lstat())
    assert cached.lstat().st_nlink == 2  # the cache's and the job's: no other copy
    assert not [p for p in cache.rglob("*") if p.name.endswith(".part")]


async def test_an_input_the_store_lost_fails_the_start_saying_so(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    async with artifact_server(db, bus, tmp_path) as store:
        producer, artifact_id = await _stored_artifact(db, store, tmp_path)
        sha = hashlib.sha256(WEIGHTS).hexdigest()
        store.path_of(sha).unlink()
        job_id = await _consumer(db, "true", producer, artifact_id)
        async with node(db, bus, tmp_path, "gpu-1") as agent:
            [attempt_id] = await placed(db, job_id, ["gpu-1"])
            await agent.start_attempt(attempt_id)
            attempt = await ended(db, attempt_id)
    assert attempt["classification"] == "permanent"
    assert f"could not place the task's inputs: blob {sha} is not in the store" in attempt["reason"]
    assert not (tmp_path / "gpu-1" / "work" / job_id / "inputs").exists()
