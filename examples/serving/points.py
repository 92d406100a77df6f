"""What the serving and batch-prediction examples share: the toy problem, the model, and
how a trained model is saved and loaded.

The problem is deliberately small enough to train in well under a second on one CPU
core: points in the plane drawn around three centres, each point's class being the
centre it was drawn around. The centres overlap a little, so no model is perfect and a
model trained on more data is measurably (if slightly) better: the closed loop's second
version has something to gain from the first version's predictions.

Everything is deterministic (seeded generators, one thread), so two runs of the same
training job produce the same parameters, bit for bit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

CLASSES = 3
HIDDEN = 16
CENTRES = torch.tensor([[0.0, 2.0], [-1.8, -1.0], [1.8, -1.0]])
SPREAD = 0.9


def draw_points(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` points and their true classes, the same for the same ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    points = CENTRES[labels] + SPREAD * torch.randn(count, 2, generator=generator)
    return points, labels


def new_model() -> nn.Module:
    """A tiny MLP: 2 coordinates in, one score per class out."""
    return nn.Sequential(nn.Linear(2, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def save(model: nn.Module, directory: Path, meta: dict[str, Any]) -> None:
    """``model.pt`` (the parameters) and ``meta.json`` (what it was trained on, how it scored)."""
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(
        {"hidden": HIDDEN, "classes": CLASSES, "state_dict": model.state_dict()}, directory / "model.pt"
    )
    (directory / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def load(directory: Path) -> tuple[nn.Module, dict[str, Any]]:
    """The model saved in ``directory``, ready to predict (``weights_only``: a model file
    is data, never code that runs on load)."""
    saved = torch.load(directory / "model.pt", weights_only=True)
    model = new_model()
    model.load_state_dict(saved["state_dict"])
    model.eval()
    meta: dict[str, Any] = json.loads((directory / "meta.json").read_text())
    return model, meta


def predict(model: nn.Module, points: torch.Tensor) -> list[tuple[int, float]]:
    """Each point's most likely class and the model's confidence in it."""
    with torch.no_grad():
        probabilities = torch.softmax(model(points), dim=1)
    confidence, label = probabilities.max(dim=1)
    return [(int(k), round(float(p), 4)) for k, p in zip(label, confidence, strict=True)]


def model_directory(name: str | None = None) -> tuple[str, Path]:
    """The model input's name and directory, from ``$CORRAL_MODEL_DIR_<NAME>`` (Corral sets
    one for each model input). ``name`` (or ``$MODEL_NAME``) picks one; without it the job
    must have exactly one model input."""
    name = name or os.environ.get("MODEL_NAME")
    found = {
        key.removeprefix("CORRAL_MODEL_DIR_"): Path(value)
        for key, value in os.environ.items()
        if key.startswith("CORRAL_MODEL_DIR_")
    }
    if name is not None:
        key = name.upper().replace("-", "_")
        if key not in found:
            raise SystemExit(f"no model input named {name!r}; add inputs: [{{model: {name}@latest}}]")
        return name, found[key]
    if len(found) != 1:
        raise SystemExit(f"expected one model input, found {len(found)}; set MODEL_NAME to pick one")
    ((key, directory),) = found.items()
    return key.lower().replace("_", "-"), directory


def model_version(directory: Path) -> int | None:
    """The version Corral placed the model at (``.../models/NAME/VERSION``), if it did."""
    return int(directory.name) if directory.name.isdigit() else None


def read_jsonl(directory: Path) -> Iterator[dict[str, Any]]:
    """Every record of every ``*.jsonl`` file under ``directory``, files in name order
    (so every reader sees the same order)."""
    for path in sorted(directory.rglob("*.jsonl")):
        with path.open() as lines:
            for line in lines:
                if line.strip():
                    yield json.loads(line)
