"""A job's inputs, resolved and pinned at submit.

Each ``JobInput`` names a model version (``mnist@3``, ``mnist@latest``) or a job's output
(``job-…:model``); before the job is stored, each becomes the artifact it stands for, and
is refused (422, naming ``inputs[i]`` and what is wrong) when the submitter may not use
it: a model they may not read is reported like one that does not exist, a missing
version lists those that exist, a job's output needs the job to be theirs, succeeded, and
to have kept that output. ``@latest`` is pinned to the newest version now, so the job
reads the same bytes whenever, and wherever, its tasks start (a retry on another node a
day later included); where it lands under ``$CORRAL_INPUT_DIR`` is pinned with it
(``models/mnist/4``, TensorFlow Serving's layout, not ``models/mnist/latest``).

The submission path (``services/api/jobs/submission.py``) calls ``pin_inputs`` in the
job's insert transaction and ``record_inputs`` after the job's row: the pins commit with
the job or not at all, and a submit without inputs pays nothing. Models and artifacts are
never rewritten or removed, so a pin read in the transaction stays true once it commits.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.api.models.access import may_read_job
from services.api.models.repository import Executor, InputRow, ModelReads, ModelWrites, Reader
from shared.errors import InvalidInput
from shared.job_io import JobInput


async def pin_inputs(db: Executor, inputs: Sequence[JobInput], reader: Reader) -> list[InputRow]:
    """Each input as the artifact it names now, or ``InvalidInput`` for the first that
    ``reader`` may not use."""
    reads = ModelReads(db)
    pinned = [await _pin(reads, position, item, reader) for position, item in enumerate(inputs)]
    _check_paths(pinned)
    return pinned


async def record_inputs(db: Executor, job_id: str, pinned: Sequence[InputRow]) -> None:
    """Store the job's pinned inputs (``api.job_inputs``), after its row, in its transaction."""
    if pinned:
        await ModelWrites(db).insert_job_inputs(job_id, pinned)


async def _pin(reads: ModelReads, position: int, item: JobInput, reader: Reader) -> InputRow:
    where = f"inputs[{position}]"
    if item.model is not None:
        name, wanted = item.model.split("@")
        version = None if wanted == "latest" else int(wanted)
        ref, artifact_id = await _model_version(reads, where, name, version, reader)
        pinned_version = ref.split("@")[1]
        path = item.path if item.path is not None else f"models/{name}/{pinned_version}"
        return InputRow(position, ref, artifact_id, path)
    assert item.artifact is not None  # JobInput names exactly one
    job_id, output = item.artifact.split(":")
    artifact_id = await _job_output(reads, where, job_id, output, reader)
    return InputRow(position, item.artifact, artifact_id, item.default_path)


async def _model_version(
    reads: ModelReads, where: str, name: str, version: int | None, reader: Reader
) -> tuple[str, str]:
    model = await reads.get_model(name, reader)
    if model is None:
        raise InvalidInput(
            f"{where}: no model named {name!r} that you may read; GET /api/v1/models lists those you may"
        )
    found = await reads.get_version(name, version)
    if found is None:
        raise InvalidInput(
            f"{where}: model {name} has no version {version}; versions: {version_list(model.latest_version)}"
        )
    return f"{name}@{found.version}", found.artifact_id


def version_list(latest: int) -> str:
    """Versions are numbered 1 … latest with no gap (none is ever removed)."""
    if latest <= 0:
        return "none"
    if latest <= 10:
        return ", ".join(str(v) for v in range(1, latest + 1))
    return f"1 … {latest}"


async def _job_output(reads: ModelReads, where: str, job_id: str, output: str, reader: Reader) -> str:
    job = await reads.job_brief(job_id)
    if job is None or not may_read_job(job, reader):
        raise InvalidInput(
            f"{where}: job {job_id} does not exist or is not yours; name an output of one of your jobs,"
            " or a model version its owner shares with you"
        )
    if job.state != "SUCCEEDED":
        raise InvalidInput(
            f"{where}: job {job_id} is {job.state}; only a succeeded job's outputs are kept as artifacts"
        )
    artifact = await reads.artifact_of_output(job_id, output)
    if artifact is None:
        kept = ", ".join(a.output for a in await reads.artifacts_of_job(job_id)) or "none"
        raise InvalidInput(f"{where}: job {job_id} has no output {output!r}; its outputs: {kept}")
    return artifact.id


def _check_paths(pinned: Sequence[InputRow]) -> None:
    """Pinning ``@latest`` can make two inputs land at one place (``mnist@latest`` and
    ``mnist@4``): the spec's own check could not see it."""
    paths = [item.path for item in pinned]
    for item in pinned:
        if paths.count(item.path) > 1 or any(p.startswith(item.path + "/") for p in paths):
            raise InvalidInput(
                f"inputs[{item.position}]: {item.ref} lands at input path {item.path!r}, as another input"
                " does; give one of them a path of its own"
            )
