"""The serving and batch-prediction examples on their own, as processes with the
environment Corral gives a task (the closed loop runs them on a stack:
``test_closed_loop.py``):

- a replica (examples/serving/serve.py) says it is not ready until its model is loaded,
  then answers with the model's version, and tells a caller what is wrong with a bad
  request;
- a batch-prediction shard (examples/batch_predict) killed mid-run, whose output
  directory is put back as the platform restores it, finishes with exactly the records
  a run that was never interrupted writes: none lost, none twice, even when a chunk was
  written after its last progress record."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral.local.ports import free_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def trained(tmp_path: Path) -> Path:
    """``inputs/`` as a task sees it: the model at ``models/points/1``, the training job's
    new points at ``data``."""
    trained = tmp_path / "trained"
    subprocess.run(  # the example's training, as its job runs it
        [sys.executable, str(EXAMPLES / "serving" / "train.py")],
        env={**os.environ, "CORRAL_OUTPUT_DIR": str(trained), "TRAIN_STEPS": "20", "POOL_POINTS": "400"},
        capture_output=True,
        timeout=60,
        check=True,
    )
    (tmp_path / "inputs" / "models" / "points").mkdir(parents=True)
    (trained / "model").rename(tmp_path / "inputs" / "models" / "points" / "1")
    (trained / "points").rename(tmp_path / "inputs" / "data")
    return tmp_path / "inputs"


@pytest.fixture
def replica(trained: Path) -> Iterator[str]:
    """serve.py on a port of its own, loading its model for a second; its base URL."""
    port = free_port()
    env = {
        **os.environ,
        "CORRAL_MODEL_DIR_POINTS": str(trained / "models" / "points" / "1"),
        "CORRAL_PORT_HTTP": str(port),
        "LOAD_DELAY_S": "1",
    }
    process = subprocess.Popen([sys.executable, str(EXAMPLES / "serving" / "serve.py")], env=env)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()  # as a drained replica is stopped
        # uvicorn shuts down gracefully, then ends by the signal it got (exit status -15).
        assert process.wait(10) == -signal.SIGTERM


def test_a_replica_is_ready_once_its_model_is_loaded_and_says_which_version_answers(replica: str) -> None:
    statuses: list[int] = []
    deadline = time.monotonic() + 30
    while 200 not in statuses and time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError):  # not listening yet
            statuses.append(httpx.get(f"{replica}/healthz", timeout=1).status_code)
        time.sleep(0.05)
    assert statuses[0] == 503, statuses  # up, loading: out of rotation
    assert statuses[-1] == 200, statuses
    answer = httpx.post(f"{replica}/predict", json={"points": [[0, 2], [1.8, -1]]}, timeout=5)
    assert answer.status_code == 200, answer.text
    assert answer.json()["version"] == 1
    assert [p["label"] for p in answer.json()["predictions"]] == [0, 2]
    for body, said in (
        ({"points": [[0]]}, "points[0] must be [x, y], two numbers; got [0]"),
        ({"points": []}, 'send {"points": [[x, y], ...]}'),
        ({"rows": [[0, 1]]}, 'send {"points": [[x, y], ...]}'),
    ):
        refused = httpx.post(f"{replica}/predict", json=body, timeout=5)
        assert refused.status_code == 422, refused.text
        assert said in refused.json()["detail"]


def _environment(tmp_path: Path, output: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "CORRAL_INPUT_DIR": str(tmp_path / "inputs"),
        "CORRAL_MODEL_DIR_POINTS": str(tmp_path / "inputs" / "models" / "points" / "1"),
        "CORRAL_OUTPUT_DIR": str(output),
        "RANK": "1",
        "WORLD_SIZE": "2",
        **extra,
    }


def _predict(env: dict[str, str]) -> str:
    done = subprocess.run(  # the example, as a task runs it
        [sys.executable, str(EXAMPLES / "batch_predict" / "predict.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _records_done(progress: Path) -> int:
    """What the shard's last progress record says (the file is replaced atomically)."""
    return int(json.loads(progress.read_text())["done"]) if progress.exists() else 0


def test_a_killed_shard_resumes_from_its_last_chunk_without_doubling_a_record(
    tmp_path: Path, trained: Path
) -> None:
    clean = tmp_path / "clean"
    _predict(_environment(tmp_path, clean))
    expected = (clean / "predictions" / "part-1.jsonl").read_text()
    assert len(expected.splitlines()) == 200  # every other record of 400

    interrupted = tmp_path / "interrupted"
    slow = _environment(tmp_path, interrupted, PREDICT_CHUNK_DELAY_S="0.5")
    shard = subprocess.Popen(  # the example, as a task runs it
        [sys.executable, str(EXAMPLES / "batch_predict" / "predict.py")], env=slow, stdout=subprocess.DEVNULL
    )
    progress = interrupted / "progress" / "part-1.json"
    deadline = time.monotonic() + 60
    while _records_done(progress) < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    shard.send_signal(signal.SIGKILL)  # preempted, with no chance to tidy up
    shard.wait()
    done = _records_done(progress)
    assert 100 <= done < 200, done
    with (interrupted / "predictions" / "part-1.jsonl").open("a") as part:
        part.write('{"id": 999, "half": "a chunk written after the last progress record"}\n')

    resumed = _predict(_environment(tmp_path, interrupted))
    assert f"rank 1: resuming after {done} of 200 records" in resumed
    assert (interrupted / "predictions" / "part-1.jsonl").read_text() == expected
