"""Train the points classifier (``points.py``) and leave it for Corral to keep.

Writes, under ``$CORRAL_OUTPUT_DIR`` (the job's ``outputs`` make them artifacts when it
succeeds):

- ``model/model.pt`` and ``model/meta.json``: the model (register it with
  ``corral model register points --from JOB:model``) and what it was trained on;
- ``points/points.jsonl``: a pool of new, unlabelled points, for a batch-prediction job
  (``examples/batch_predict``) to label.

Extra training data: every ``*.jsonl`` record under ``$CORRAL_INPUT_DIR/extra`` (give
the job a batch prediction's ``predictions`` artifact as an input at ``path: extra``)
with a ``label`` and a ``confidence`` of at least ``MIN_CONFIDENCE`` is added to the
training set: pseudo-labelling, so the second version learns from the first version's
confident predictions. Each run prints what it trains on and a final summary (one JSON
line). ``TRAIN_STEPS``, ``POOL_POINTS`` and ``MIN_CONFIDENCE`` in the job's ``env`` change
the defaults below.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from points import draw_points, new_model, read_jsonl, save
from torch import nn

TRAIN_POINTS = 300
TEST_POINTS = 2000
POOL_POINTS = int(os.environ.get("POOL_POINTS", "400"))
STEPS = int(os.environ.get("TRAIN_STEPS", "300"))
MIN_CONFIDENCE = float(os.environ.get("MIN_CONFIDENCE", "0.9"))


def extra_training_data(directory: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The confident predictions under ``directory`` as (points, labels); empty if none."""
    kept = [r for r in read_jsonl(directory) if r.get("confidence", 0.0) >= MIN_CONFIDENCE]
    points = torch.tensor([r["x"] for r in kept], dtype=torch.float32).reshape(-1, 2)
    labels = torch.tensor([int(r["label"]) for r in kept], dtype=torch.long)
    return points, labels


def accuracy(model: nn.Module, points: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(points).argmax(dim=1) == labels).float().mean())


def main() -> None:
    torch.set_num_threads(1)  # a few hundred small steps: threads would only contend
    started = time.monotonic()
    output = Path(os.environ.get("CORRAL_OUTPUT_DIR", "outputs"))
    inputs = Path(os.environ.get("CORRAL_INPUT_DIR", "inputs"))

    points, labels = draw_points(TRAIN_POINTS, seed=1)
    extra_points, extra_labels = extra_training_data(inputs / "extra")
    print(f"training on {len(points)} labelled points and {len(extra_points)} predicted ones", flush=True)
    points = torch.cat([points, extra_points])
    labels = torch.cat([labels, extra_labels])

    torch.manual_seed(0)
    model = new_model()
    optimiser = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(STEPS):
        loss = nn.functional.cross_entropy(model(points), labels)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()

    test_points, test_labels = draw_points(TEST_POINTS, seed=2)
    meta = {
        "trained_by": os.environ.get("CORRAL_JOB_ID", "local"),
        "labelled_points": TRAIN_POINTS,
        "predicted_points": len(extra_points),
        "steps": STEPS,
        "final_loss": round(loss.item(), 5),
        "test_accuracy": round(accuracy(model, test_points, test_labels), 4),
    }
    save(model, output / "model", meta)

    pool, _ = draw_points(POOL_POINTS, seed=3)  # their labels are what a prediction guesses
    (output / "points").mkdir(parents=True, exist_ok=True)
    with (output / "points" / "points.jsonl").open("w") as lines:
        for index, point in enumerate(pool.tolist()):
            lines.write(json.dumps({"id": index, "x": [round(v, 5) for v in point]}) + "\n")

    print(json.dumps({**meta, "seconds": round(time.monotonic() - started, 2)}), flush=True)


if __name__ == "__main__":
    main()
