"""Outputs up, checkpoints back: a job's declared outputs become its artifacts when it
succeeds, on real Postgres and NATS with real processes (``artifact_stand.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from pathlib import Path

import pytest

from services.launcher.agent.artifacts import ArtifactsRefused, TaskArtifacts
from services.launcher.agent.environment import artifact_environment
from services.launcher.artifacts.staging import Staging
from shared.artifacts import transport
from shared.artifacts.manifest import MANIFEST, manifest_sha256
from shared.artifacts.store import blob_key, open_store, s3_client
from shared.bus.nats import NatsBus
from shared.db.pool import Database
from tests.artifact_s3 import moto_s3
from tests.launcher.artifact_stand import (
    HeldStore,
    artifact_server,
    artifacts_of,
    decided,
    ended,
    job_spec,
    node,
    placed,
    serving,
    submitted,
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def test_a_succeeded_job_keeps_the_union_of_its_tasks_outputs(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    """Two tasks: each its own shard, both the same config; the model output holds the
    config once, the predictions output both shards; the blobs are in the store."""
    command = (
        "mkdir -p $CORRAL_OUTPUT_DIR/model $CORRAL_OUTPUT_DIR/preds"
        " && printf 'lr=0.1' > $CORRAL_OUTPUT_DIR/model/config"
        ' && printf "shard $CORRAL_TASK_INDEX" > $CORRAL_OUTPUT_DIR/preds/part-$CORRAL_TASK_INDEX'
        " && printf scratch > $CORRAL_OUTPUT_DIR/not-declared"
    )
    spec = job_spec(
        command,
        instances=2,
        outputs=[{"name": "model", "path": "model"}, {"name": "predictions", "path": "preds"}],
    )
    async with artifact_server(db, bus, tmp_path) as store, node(db, bus, tmp_path, "gpu-1") as agent:
        job_id = await submitted(db, spec)
        attempt_ids = await placed(db, job_id, ["gpu-1", "gpu-1"])
        await agent.reconcile()
        for attempt_id in attempt_ids:
            assert (await ended(db, attempt_id))["exit_code"] == 0
        assert (await decided(db, job_id))["state"] == "SUCCEEDED"
    artifacts = await artifacts_of(db, job_id)
    model, predictions = artifacts["model"], artifacts["predictions"]
    assert model["manifest"] == [{"path": "config", "size": 6, "sha256": sha(b"lr=0.1")}]
    assert (model["files"], model["size_bytes"]) == (1, 6)
    assert model["sha256"] == manifest_sha256(MANIFEST.validate_python(model["manifest"]))
    assert predictions["manifest"] == [
        {"path": "part-0", "size": 7, "sha256": sha(b"shard 0")},
        {"path": "part-1", "size": 7, "sha256": sha(b"shard 1")},
    ]
    for content in (b"lr=0.1", b"shard 0", b"shard 1", b"scratch"):
        assert await store.read(sha(content), 0, 100) == content
    assert not any((tmp_path / "staging").rglob("*.part"))


async def test_the_same_file_differing_between_tasks_fails_the_job_naming_it(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    spec = job_spec(
        "mkdir -p $CORRAL_OUTPUT_DIR/model && echo $CORRAL_TASK_INDEX > $CORRAL_OUTPUT_DIR/model/weights",
        instances=2,
        outputs=[{"name": "model", "path": "model"}],
    )
    async with artifact_server(db, bus, tmp_path), node(db, bus, tmp_path, "gpu-1") as agent:
        job_id = await submitted(db, spec)
        attempt_ids = await placed(db, job_id, ["gpu-1", "gpu-1"])
        await agent.reconcile()
        for attempt_id in attempt_ids:
            await ended(db, attempt_id)
        job = await decided(db, job_id)
    assert job["state"] == "FAILED"
    assert "tasks worker-0 and worker-1 left different model/weights" in job["reason"]
    assert await artifacts_of(db, job_id) == {}


async def test_a_task_output_over_the_limit_is_not_kept_and_its_end_says_so(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    spec = job_spec(
        "head -c 3000000 /dev/zero > $CORRAL_OUTPUT_DIR/big", outputs=[{"name": "all", "path": "big"}]
    )
    async with (
        artifact_server(db, bus, tmp_path),
        node(db, bus, tmp_path, "gpu-1", max_output_bytes=1 << 20) as agent,
    ):
        job_id = await submitted(db, spec)
        [attempt_id] = await placed(db, job_id, ["gpu-1"])
        await agent.start_attempt(attempt_id)
        attempt = await ended(db, attempt_id)
        job = await decided(db, job_id)
    assert attempt["exit_code"] == 0  # the task's own end is kept
    assert "its outputs were not saved" in attempt["reason"]
    assert "CORRAL_ARTIFACTS_MAX_TASK_OUTPUT_MB=1" in attempt["reason"]
    assert job["state"] == "FAILED"
    assert "the outputs of task worker-0 were not saved" in job["reason"]


async def test_a_retried_task_finds_its_earlier_attempts_outputs_on_another_node(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    """The first attempt checkpoints and fails; the next, on another node, starts from
    that checkpoint, and the job's artifact is what the last attempt left."""
    command = (
        'if [ -f "$CORRAL_OUTPUT_DIR/ckpt/step" ]; then'
        ' cp "$CORRAL_OUTPUT_DIR/ckpt/step" "$CORRAL_OUTPUT_DIR/resumed-from" && exit 0;'
        ' else mkdir -p "$CORRAL_OUTPUT_DIR/ckpt" && echo 300 > "$CORRAL_OUTPUT_DIR/ckpt/step" && exit 1; fi'
    )
    spec = job_spec(command, outputs=[{"name": "all", "path": "resumed-from"}], retry={"max_retries": 1})
    async with (
        artifact_server(db, bus, tmp_path),
        node(db, bus, tmp_path, "gpu-1") as one,
        node(db, bus, tmp_path, "gpu-2") as two,
    ):
        job_id = await submitted(db, spec)
        [first] = await placed(db, job_id, ["gpu-1"])
        await one.start_attempt(first)
        assert (await ended(db, first))["exit_code"] == 1
        saved = await db.fetchval("SELECT manifest FROM launcher.task_outputs WHERE attempt_id = $1", first)
        assert saved == [{"path": "ckpt/step", "size": 4, "sha256": sha(b"300\n")}]
        [second] = await placed(db, job_id, ["gpu-2"], generation=2)
        await two.start_attempt(second)
        assert (await ended(db, second))["exit_code"] == 0
        assert (await decided(db, job_id))["state"] == "SUCCEEDED"
    artifact = (await artifacts_of(db, job_id))["all"]
    assert artifact["manifest"] == [{"path": "resumed-from", "size": 4, "sha256": sha(b"300\n")}]


async def test_an_upload_cut_short_leaves_no_record_and_the_next_agent_completes_it(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    """The agent dies mid-upload (its last chunk of the weights sent, the launcher still
    storing them): no task_outputs row, no artifact. The next agent of the node settles
    the attempt, sends what is still missing, and the job succeeds whole."""
    spec = job_spec(
        "head -c 3000000 /dev/urandom > $CORRAL_OUTPUT_DIR/weights && echo done > $CORRAL_OUTPUT_DIR/log",
        outputs=[{"name": "all", "path": "weights"}],
    )
    store = HeldStore(tmp_path / "store", hold_over=1_000_000)
    async with artifact_server(db, bus, tmp_path, store):
        job_id = await submitted(db, spec)
        [attempt_id] = await placed(db, job_id, ["gpu-1"])

        async def first_agent() -> None:
            async with node(db, bus, tmp_path, "gpu-1") as agent:
                await agent.start_attempt(attempt_id)
                await asyncio.Event().wait()

        running = asyncio.create_task(first_agent())
        await asyncio.wait_for(store.holding.wait(), 20)
        running.cancel()  # the agent dies mid-upload
        with contextlib.suppress(asyncio.CancelledError):
            await running
        store.release.set()
        await asyncio.sleep(0.2)  # (the launcher finishes what it was doing)
        saved = "SELECT count(*) FROM launcher.task_outputs WHERE attempt_id = $1"
        assert await db.fetchval(saved, attempt_id) == 0
        assert (
            await db.fetchval("SELECT state FROM launcher.attempts WHERE id = $1", attempt_id)
        ) == "RUNNING"
        assert (await decided(db, job_id))["state"] == "RUNNING"  # (nothing to decide yet)

        async with node(db, bus, tmp_path, "gpu-1") as agent:
            await agent.reconcile()
            assert (await ended(db, attempt_id))["exit_code"] == 0
        assert await db.fetchval(saved, attempt_id) == 1
        assert (await decided(db, job_id))["state"] == "SUCCEEDED"
    work = tmp_path / "gpu-1" / "work" / job_id / "outputs" / "worker-0" / "weights"
    artifact = (await artifacts_of(db, job_id))["all"]
    assert artifact["manifest"] == [{"path": "weights", "size": 3_000_000, "sha256": sha(work.read_bytes())}]
    assert await store.read(artifact["manifest"][0]["sha256"], 0, 3_000_000) == work.read_bytes()


async def test_a_node_may_not_touch_another_nodes_attempts(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    spec = job_spec("sleep 30", outputs=[{"name": "all", "path": "out"}])
    async with artifact_server(db, bus, tmp_path) as store:
        job_id = await submitted(db, spec)
        [attempt_id] = await placed(db, job_id, ["gpu-1"])
        secret = tmp_path / "secret"
        secret.write_bytes(b"gpu-1's checkpoint")
        await store.put(sha(b"gpu-1's checkpoint"), secret)
        other = TaskArtifacts(bus.nc, "gpu-9", tmp_path / "cache", max_output_bytes=1 << 20, patience_s=0)
        with pytest.raises(ArtifactsRefused, match=f"attempt {attempt_id} is not node gpu-9's"):
            await other.prepare(attempt_id, job_id, tmp_path / "work", tmp_path / "work" / "out")
        headers = {
            transport.ATTEMPT: attempt_id,
            transport.SHA256: sha(b"gpu-1's checkpoint"),
            transport.OFFSET: "0",
        }
        reply = await bus.nc.request(transport.subject("gpu-9", "blob"), b"", headers=headers, timeout=5)
        assert "not node gpu-9's" in (reply.headers or {})[transport.ERROR]
        assert reply.data != b"gpu-1's checkpoint"
        # Its own attempt reads only what the attempt may read: not any blob it names.
        reply = await bus.nc.request(transport.subject("gpu-1", "blob"), b"", headers=headers, timeout=5)
        assert "is not an input or a checkpoint" in (reply.headers or {})[transport.ERROR]
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "forged").write_text("x")
        problem = await other.save(attempt_id, tmp_path / "out")
        assert problem is not None
        assert "not node gpu-9's" in problem
        assert await db.fetchval("SELECT count(*) FROM launcher.task_outputs") == 0


async def test_outputs_go_to_an_s3_store(db: Database, bus: NatsBus, tmp_path: Path) -> None:
    """The launcher configured for S3 (a real moto server): the same upload, its blobs in
    the bucket under their keys."""
    spec = job_spec(
        "printf 'weights' > $CORRAL_OUTPUT_DIR/model.bin", outputs=[{"name": "model", "path": "model.bin"}]
    )
    with moto_s3(tmp_path) as settings:
        store = open_store(settings, tmp_path)
        async with serving(db, bus, tmp_path, store), node(db, bus, tmp_path, "gpu-1") as agent:
            job_id = await submitted(db, spec)
            [attempt_id] = await placed(db, job_id, ["gpu-1"])
            await agent.start_attempt(attempt_id)
            assert (await ended(db, attempt_id))["exit_code"] == 0
            assert (await decided(db, job_id))["state"] == "SUCCEEDED"
        artifact = (await artifacts_of(db, job_id))["model"]
        assert artifact["manifest"] == [{"path": "model.bin", "size": 7, "sha256": sha(b"weights")}]
        keys = [o["Key"] for o in s3_client(settings).list_objects_v2(Bucket=settings.s3_bucket)["Contents"]]
        # The file, and the task's manifest (uploaded as a blob: here the artifact's own).
        assert sorted(keys) == sorted([blob_key(sha(b"weights")), blob_key(artifact["sha256"])])
        assert await store.read(sha(b"weights"), 0, 100) == b"weights"


def test_a_model_input_gets_its_version_directory_in_the_environment() -> None:
    inputs = [("mnist-small@4", "models/mnist-small/4"), ("job-x:out", "artifacts/job-x/out")]
    env = artifact_environment(Path("/w/job/inputs"), Path("/w/job/outputs/worker-0"), inputs)
    assert env == {
        "CORRAL_INPUT_DIR": "/w/job/inputs",
        "CORRAL_OUTPUT_DIR": "/w/job/outputs/worker-0",
        "CORRAL_MODEL_DIR_MNIST_SMALL": "/w/job/inputs/models/mnist-small/4",
    }


async def test_abandoned_uploads_are_swept_after_an_hour(tmp_path: Path) -> None:
    staging = Staging(tmp_path / "staging")
    assert await staging.write("att-old", "a" * 64, 0, 10, b"12345") is None
    assert await staging.write("att-new", "b" * 64, 0, 10, b"12345") is None
    old = staging.part_of("att-old", "a" * 64)
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    os.utime(old.parent, (two_hours_ago, two_hours_ago))
    assert await staging.sweep() == 1
    assert not old.exists()
    assert staging.part_of("att-new", "b" * 64).exists()


async def test_a_manifest_larger_than_a_message_is_uploaded_whole(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    """12,000 files (one content): the manifest alone is more than NATS carries in one
    message, so it travels as a blob of its own."""
    spec = job_spec(
        'cd $CORRAL_OUTPUT_DIR && mkdir shards && for i in $(seq 12000); do echo same > "shards/f$i"; done',
        outputs=[{"name": "shards", "path": "shards"}],
    )
    async with artifact_server(db, bus, tmp_path), node(db, bus, tmp_path, "gpu-1") as agent:
        job_id = await submitted(db, spec)
        [attempt_id] = await placed(db, job_id, ["gpu-1"])
        await agent.start_attempt(attempt_id)
        assert (await ended(db, attempt_id, timeout_s=60))["exit_code"] == 0
        assert (await decided(db, job_id))["state"] == "SUCCEEDED"
    artifact = (await artifacts_of(db, job_id))["shards"]
    assert (artifact["files"], artifact["size_bytes"]) == (12_000, 12_000 * 5)
    assert {entry["sha256"] for entry in artifact["manifest"]} == {sha(b"same\n")}


async def test_an_upload_waits_for_a_launcher_that_is_away(
    db: Database, bus: NatsBus, tmp_path: Path
) -> None:
    """The task ends while nobody answers for artifacts: its end is not reported until
    its outputs are saved, which they are once the launcher is back."""
    spec = job_spec(
        "sleep 0.3 && echo kept > $CORRAL_OUTPUT_DIR/result", outputs=[{"name": "all", "path": "result"}]
    )
    async with node(db, bus, tmp_path, "gpu-1") as agent:
        async with artifact_server(db, bus, tmp_path):
            job_id = await submitted(db, spec)
            [attempt_id] = await placed(db, job_id, ["gpu-1"])
            await agent.start_attempt(attempt_id)
        await asyncio.sleep(1.5)  # (the task has ended meanwhile)
        assert await db.fetchval("SELECT state FROM launcher.attempts WHERE id = $1", attempt_id) == "RUNNING"
        async with artifact_server(db, bus, tmp_path):
            attempt = await ended(db, attempt_id)
            assert attempt["exit_code"] == 0
            assert "not saved" not in attempt["reason"]
            assert (await decided(db, job_id))["state"] == "SUCCEEDED"
    assert (await artifacts_of(db, job_id))["all"]["files"] == 1
