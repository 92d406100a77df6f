"""A succeeded job's artifacts: one per declared output, written in the transaction that
decides the job SUCCEEDED (``services/launcher/outcomes.py``), so a job is never
SUCCEEDED without its artifacts, nor has artifacts without having succeeded.

An output's artifact is the union of what the generation's succeeded tasks left under
the output's ``path`` (each task uploads its whole output directory when it ends:
``services/launcher/agent/artifacts.py``), paths relative to ``path``. Tasks that write
disjoint files (shards of a prediction) add up; the same file from two tasks (the model
every rank of a data-parallel job saves) must be the same bytes. Anything else cannot be
one artifact: the job FAILS saying which file differs, as it does when a succeeded task's
outputs could not be saved at all.
"""

from __future__ import annotations

from services.launcher.artifacts.repository import insert_artifact, succeeded_tasks
from shared.artifacts.manifest import ManifestEntry, canonical, manifest_sha256, under
from shared.db.pool import Connection
from shared.ids import new_artifact_id
from shared.jobs import JobSpec


class OutputsUnkept(Exception):
    """The job's outputs cannot be kept; the message says why (the job's failure reason)."""


async def commit_job_outputs(conn: Connection, job_id: str, generation: int, spec: JobSpec) -> str | None:
    """Write the job's artifacts; None, or why they cannot be (the job must then FAIL)."""
    if not spec.outputs:
        return None
    tasks = await succeeded_tasks(conn, job_id, generation)
    try:
        artifacts = union_outputs(
            spec, [(f"{t.task_role}-{t.task_index}", t.manifest, t.reason) for t in tasks]
        )
    except OutputsUnkept as exc:
        return str(exc)
    for name, manifest in artifacts.items():
        await insert_artifact(conn, new_artifact_id(), job_id, name, manifest, manifest_sha256(manifest))
    return None


def union_outputs(
    spec: JobSpec, tasks: list[tuple[str, list[ManifestEntry] | None, str]]
) -> dict[str, list[ManifestEntry]]:
    """Each declared output's manifest, from (task, its uploaded manifest or None, its
    end's reason) of each succeeded task."""
    for task, manifest, reason in tasks:
        if manifest is None:
            raise OutputsUnkept(f"the outputs of task {task} were not saved: {reason or 'no upload arrived'}")
    artifacts: dict[str, list[ManifestEntry]] = {}
    for output in spec.outputs:
        files: dict[str, tuple[ManifestEntry, str]] = {}
        for task, manifest, _ in tasks:
            assert manifest is not None
            for entry in under(manifest, output.path):
                seen = files.get(entry.path)
                if seen is None:
                    files[entry.path] = (entry, task)
                elif (seen[0].sha256, seen[0].size) != (entry.sha256, entry.size):
                    raise OutputsUnkept(
                        f"output {output.name}: tasks {seen[1]} and {task} left different "
                        f"{output.path}/{entry.path} (sha256 {seen[0].sha256[:12]}… and "
                        f"{entry.sha256[:12]}…); write it from one task, or to a path of each task's own"
                    )
        artifacts[output.name] = canonical(entry for entry, _ in files.values())
    return artifacts
