"""Batch prediction as a Corral job: label every point of a data set with a registered
model, sharded over the role's instances, resumable after preemption.

Each task takes the records whose position ``% WORLD_SIZE == RANK`` (Corral gives every
task of a role of N instances its ``RANK`` and ``WORLD_SIZE``) from every ``*.jsonl``
file under ``$CORRAL_INPUT_DIR/data`` (the job's data input, at ``path: data``), labels
them with the model input (``$CORRAL_MODEL_DIR_<NAME>``) and appends them to
``$CORRAL_OUTPUT_DIR/predictions/part-<rank>.jsonl``; the job's ``predictions`` output
is the union of every shard's file.

Resuming: after each chunk the task records, in ``progress/part-<rank>.json`` beside its
predictions, how many records are done and how long its part file is at that point. The
file is replaced atomically (write, then rename), so it always describes a complete
chunk. Corral keeps a task's output directory when it ends, for whatever reason, and
puts it back before the next attempt of the same task starts (on whichever node), so
a preempted shard carries on from its last chunk: it cuts its part file back to the
recorded length (a chunk written after the last record is redone, never doubled) and
skips what is done.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# The serving example's module: the toy problem, and how a model is loaded.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serving"))

import torch
from points import load, model_directory, model_version, predict, read_jsonl

CHUNK = int(os.environ.get("PREDICT_CHUNK", "50"))
# Seconds to wait after each chunk: makes a run long enough to preempt by hand.
CHUNK_DELAY_S = float(os.environ.get("PREDICT_CHUNK_DELAY_S", "0"))


def read_progress(path: Path) -> tuple[int, int]:
    """(records done, length of the part file then); (0, 0) on a first start."""
    try:
        progress = json.loads(path.read_text())
    except FileNotFoundError:
        return 0, 0
    return int(progress["done"]), int(progress["bytes"])


def write_progress(path: Path, done: int, size: int) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text(json.dumps({"done": done, "bytes": size}))
    scratch.replace(path)  # atomic: a reader sees the old record or the new, never half


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    inputs = Path(os.environ.get("CORRAL_INPUT_DIR", "inputs"))
    output = Path(os.environ.get("CORRAL_OUTPUT_DIR", "outputs"))
    name, directory = model_directory()
    model, _ = load(directory)
    served_as = f"{name}@{model_version(directory) or 'local'}"

    shard: list[dict[str, Any]] = [
        record for position, record in enumerate(read_jsonl(inputs / "data")) if position % world == rank
    ]
    (output / "predictions").mkdir(parents=True, exist_ok=True)
    (output / "progress").mkdir(parents=True, exist_ok=True)
    part = output / "predictions" / f"part-{rank}.jsonl"
    progress = output / "progress" / f"part-{rank}.json"
    done, size = read_progress(progress)
    if done:
        print(f"rank {rank}: resuming after {done} of {len(shard)} records", flush=True)
    with part.open("a+b") as lines:
        lines.truncate(size)  # drop a chunk written after the last progress record
        lines.seek(size)
        while done < len(shard):
            chunk = shard[done : done + CHUNK]
            points = torch.tensor([record["x"] for record in chunk], dtype=torch.float32)
            for record, (label, confidence) in zip(chunk, predict(model, points), strict=True):
                answer = {**record, "label": label, "confidence": confidence, "model": served_as}
                lines.write((json.dumps(answer) + "\n").encode())
            lines.flush()
            os.fsync(lines.fileno())
            done += len(chunk)
            write_progress(progress, done, lines.tell())
            print(f"rank {rank}: {done}/{len(shard)} records", flush=True)
            time.sleep(CHUNK_DELAY_S)
    print(f"rank {rank} of {world}: {len(shard)} records labelled by {served_as}", flush=True)


if __name__ == "__main__":
    main()
