"""A node agent's artifact transfers, over the bus with the launcher
(``shared/artifacts/transport.py``): a task's inputs and checkpoint down before it
starts, its output directory up when it ends.

Down: the launcher says what the attempt reads (each input's manifest, and what the same
task left in its latest earlier attempt); every blob not yet in the node's cache is
fetched chunk by chunk, verified against its sha256 and only then renamed into the cache
(``input_tree.py`` places the inputs from there, read-only, and restores the checkpoint).
A launcher that does not answer makes the start fail ``inputs_unavailable`` (transient:
the job is placed again); a refusal (an input's artifact gone) ``inputs_refused``.

Up: the output directory is walked without following links (what is not a regular file
is skipped, with a log line), each file hashed; the launcher says which blobs its store
lacks, those are sent, then the manifest (``complete``), which the launcher records only
once every blob is stored. An agent killed mid-upload leaves no record; the next agent,
settling the attempt, starts again and sends only what is still missing. While the
launcher is away the upload is retried for ``patience_s``; the task's end is reported
either way, saying when its outputs could not be saved.

Concurrency: one download per blob at a time on this node (a lock per sha256), so two
tasks reading one model fetch it once; a job's inputs are placed under a lock per job.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nats.errors

from services.launcher.agent import input_tree
from services.launcher.agent.environment import artifact_environment
from services.launcher.agent.tasks import Task
from shared.artifacts import manifest, transport
from shared.artifacts.manifest import ManifestEntry
from shared.artifacts.transport import (
    CHUNK_BYTES,
    MISSING_BATCH,
    CompleteRequest,
    InputsReply,
    InputsRequest,
    MissingReply,
    MissingRequest,
    PlacedInput,
)
from shared.jobs import JobSpec

log = logging.getLogger(__name__)
MIB = 1024 * 1024


class ArtifactsProblem(Exception):
    """A task's inputs could not be had; ``platform``: how its end is classified."""

    platform = "inputs_unavailable"


class ArtifactsUnavailable(ArtifactsProblem):
    """The launcher did not answer (it may be restarting), or this node's disk failed:
    worth trying again (transient)."""


class ArtifactsRefused(ArtifactsProblem):
    """The launcher refused, saying why: trying again will not help (permanent)."""

    platform = "inputs_refused"


NO_LINK = "this node agent has no connection to the launcher for artifacts"


def input_dir(work_dir: Path) -> Path:
    """``$CORRAL_INPUT_DIR`` of a job's tasks on a node."""
    return work_dir / "inputs"


def output_dir_of(spec: JobSpec, work_dir: Path, role: str, index: int) -> Path | None:
    """``$CORRAL_OUTPUT_DIR`` of one task (its own, beside its job's other tasks'), where
    its job declares outputs."""
    return work_dir / "outputs" / f"{role}-{index}" if spec.outputs else None


async def prepare_task(
    artifacts: TaskArtifacts | None, task: Task, spec: JobSpec, cwd: Path
) -> dict[str, str]:
    """Place the job's inputs and the task's checkpoint before it starts; the task's
    environment for them. ``ArtifactsProblem`` when they could not be had."""
    if artifacts is None:
        raise ArtifactsRefused(NO_LINK)
    output_dir = output_dir_of(spec, cwd, task.role, task.index)
    try:
        placed = await artifacts.prepare(task.attempt_id, task.job_id, cwd, output_dir)
    except OSError as exc:
        raise ArtifactsUnavailable(f"this node could not write them: {exc}") from exc
    task.output_dir = output_dir  # (set once it may run: a task that never ran has nothing to keep)
    return artifact_environment(input_dir(cwd), output_dir, [(p.ref, p.path) for p in placed])


async def save_outputs(artifacts: TaskArtifacts | None, task: Task) -> None:
    """Upload an ended task's output directory; why it could not be, in
    ``task.outputs_problem`` (its end's report says so). The launcher decides the job on
    that report: the outputs must be recorded before it is made."""
    if task.output_dir is None or task.fenced:
        return
    if artifacts is None:
        task.outputs_problem = NO_LINK
        return
    task.outputs_problem = await artifacts.save(task.attempt_id, task.output_dir)


class TaskArtifacts:
    def __init__(
        self,
        nc: Any,
        node_id: str,
        cache_dir: Path,
        *,
        max_output_bytes: int,
        timeout_s: float = 10.0,
        patience_s: float = 300.0,
    ) -> None:
        self._nc = nc
        self._node_id = node_id
        self.cache_dir = cache_dir
        self._max_output_bytes = max_output_bytes
        self._timeout_s = timeout_s
        self._patience_s = patience_s
        self._fetching: dict[str, asyncio.Lock] = {}
        self._placing: dict[str, asyncio.Lock] = {}

    # --- the bus -----------------------------------------------------------------------

    async def _ask(
        self,
        verb: str,
        payload: bytes = b"",
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        try:
            reply = await self._nc.request(
                transport.subject(self._node_id, verb),
                payload,
                timeout=timeout_s or self._timeout_s,
                headers=headers,
            )
        except (nats.errors.Error, TimeoutError) as exc:
            raise ArtifactsUnavailable(f"the launcher did not answer ({type(exc).__name__})") from exc
        headers = reply.headers or {}
        refusal = headers.get(transport.ERROR)
        if refusal and headers.get(transport.RETRY):
            raise ArtifactsUnavailable(refusal)
        if refusal:
            raise ArtifactsRefused(refusal)
        return reply

    # --- down --------------------------------------------------------------------------

    async def prepare(
        self, attempt_id: str, job_id: str, work_dir: Path, task_output_dir: Path | None
    ) -> list[PlacedInput]:
        """Place the job's inputs and restore the task's checkpoint (with outputs
        declared: ``task_output_dir``); the inputs placed, for the task's environment."""
        reply = await self._ask("inputs", InputsRequest(attempt_id=attempt_id).model_dump_json().encode())
        placed = InputsReply.model_validate_json(reply.data)
        for entry in [e for i in placed.inputs for e in i.manifest] + (placed.checkpoint or []):
            await self._cached(attempt_id, entry)
        await asyncio.to_thread(work_dir.mkdir, 0o700, True, True)
        if placed.inputs:
            lock = self._placing.setdefault(job_id, asyncio.Lock())
            async with lock:
                await asyncio.to_thread(
                    input_tree.place_inputs, self.cache_dir, input_dir(work_dir), placed.inputs
                )
        if task_output_dir is not None:
            await asyncio.to_thread(
                input_tree.restore_checkpoint, self.cache_dir, task_output_dir, placed.checkpoint
            )
            if placed.checkpoint:
                log.info(
                    "attempt %s resumes from %d file(s) of an earlier attempt",
                    attempt_id,
                    len(placed.checkpoint),
                )
        return placed.inputs

    async def _cached(self, attempt_id: str, entry: ManifestEntry) -> Path:
        path = input_tree.blob_path(self.cache_dir, entry.sha256)
        lock = self._fetching.setdefault(entry.sha256, asyncio.Lock())
        async with lock:
            if not path.is_file():
                await self._fetch(attempt_id, entry, path)
        self._fetching.pop(entry.sha256, None)
        return path

    async def _fetch(self, attempt_id: str, entry: ManifestEntry, path: Path) -> None:
        partial = path.parent / f".{entry.sha256}.{uuid.uuid4().hex}.part"
        fd = await asyncio.to_thread(_create, partial)
        digest = hashlib.sha256()
        offset = 0
        try:
            try:
                while True:
                    headers = {
                        transport.ATTEMPT: attempt_id,
                        transport.SHA256: entry.sha256,
                        transport.OFFSET: str(offset),
                    }
                    reply = await self._ask("blob", headers=headers)
                    data: bytes = reply.data
                    size = int((reply.headers or {}).get(transport.SIZE, "-1"))
                    digest.update(data)
                    await asyncio.to_thread(os.write, fd, data)
                    offset += len(data)
                    if offset >= size or not data:
                        break
                await asyncio.to_thread(os.fsync, fd)
            finally:
                os.close(fd)
            if offset != entry.size or digest.hexdigest() != entry.sha256:
                raise ArtifactsRefused(
                    f"{entry.path} arrived as {offset} bytes of sha256 {digest.hexdigest()}, "
                    f"not the {entry.size} bytes of {entry.sha256} it should be"
                )
            await asyncio.to_thread(os.replace, partial, path)
        finally:
            await asyncio.to_thread(partial.unlink, True)

    # --- up ----------------------------------------------------------------------------

    async def save(self, attempt_id: str, task_output_dir: Path) -> str | None:
        """Upload the task's whole output directory; None once the launcher recorded it,
        else why it could not be saved (for the task's end)."""
        walked = await asyncio.to_thread(manifest.walk, task_output_dir)
        for skipped in walked.skipped:
            log.info("attempt %s: %s is not a regular file; not saved", attempt_id, skipped)
        if walked.size > self._max_output_bytes:
            return (
                f"its output directory holds {walked.size / MIB:.0f} MiB, more than "
                f"CORRAL_ARTIFACTS_MAX_TASK_OUTPUT_MB={self._max_output_bytes // MIB}; nothing was saved"
            )
        try:
            entries = await asyncio.to_thread(manifest.build, walked.files)
        except OSError as exc:
            return f"its output directory could not be read: {exc}"
        deadline = time.monotonic() + self._patience_s
        pause = 0.5
        while True:
            try:
                await self._upload(attempt_id, entries, walked.files)
                return None
            except ArtifactsRefused as exc:
                return f"the launcher refused them: {exc}"
            except OSError as exc:
                return f"its output directory could not be read: {exc}"
            except ArtifactsUnavailable as exc:
                if time.monotonic() > deadline:
                    return f"{exc} for {self._patience_s:.0f}s"
                log.warning("could not upload the outputs of %s (%s); retrying", attempt_id, exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 10.0)

    async def _upload(self, attempt_id: str, entries: list[ManifestEntry], files: dict[str, Path]) -> None:
        listing = manifest.canonical_json(entries)
        listing_sha256 = hashlib.sha256(listing).hexdigest()
        first: dict[str, ManifestEntry] = {}
        for entry in entries:
            first.setdefault(entry.sha256, entry)
        shas = sorted({*first, listing_sha256})
        missing: list[str] = []
        for start in range(0, len(shas), MISSING_BATCH):
            batch = MissingRequest(attempt_id=attempt_id, sha256s=shas[start : start + MISSING_BATCH])
            reply = await self._ask("missing", batch.model_dump_json().encode())
            missing += MissingReply.model_validate_json(reply.data).missing
        for sha256 in missing:
            if sha256 in first:
                entry = first[sha256]
                with _opened(files[entry.path]) as fd:
                    await self._send(attempt_id, sha256, entry.size, functools.partial(_read_at, fd))
            else:  # the manifest itself
                await self._send(attempt_id, sha256, len(listing), lambda at: _slice(listing, at))
        done = CompleteRequest(attempt_id=attempt_id, manifest_sha256=listing_sha256)
        await self._ask(
            "complete", done.model_dump_json().encode(), timeout_s=self._long_wait(len(entries) * 100)
        )
        log.info(
            "attempt %s: saved %d file(s) of its outputs (%d sent)", attempt_id, len(entries), len(missing)
        )

    async def _send(
        self, attempt_id: str, sha256: str, size: int, read: Callable[[int], Awaitable[bytes]]
    ) -> None:
        """One blob, chunk after chunk. The chunk that completes it waits while the
        launcher verifies and stores the whole blob: its wait grows with the blob."""
        offset = 0
        while True:
            data = await read(offset)
            headers = {
                transport.ATTEMPT: attempt_id,
                transport.SHA256: sha256,
                transport.OFFSET: str(offset),
                transport.SIZE: str(size),
            }
            last = offset + len(data) >= size or not data
            await self._ask("upload", data, headers, timeout_s=self._long_wait(size) if last else None)
            offset += len(data)
            if last:
                return

    def _long_wait(self, size: int) -> float:
        """How long to wait for the launcher to hash and store ``size`` bytes (at 20 MiB/s
        at worst: an S3 upload of a large blob)."""
        return self._timeout_s + size / (20 * MIB)


async def _read_at(fd: int, offset: int) -> bytes:
    return await asyncio.to_thread(os.pread, fd, CHUNK_BYTES, offset)


async def _slice(data: bytes, offset: int) -> bytes:
    return data[offset : offset + CHUNK_BYTES]


def _create(path: Path) -> int:
    """A new cache file, read-only once written (the mode applies to later opens)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, input_tree.READ_ONLY_FILE)


@contextmanager
def _opened(path: Path) -> Iterator[int]:
    """A task's file, opened without following a link it may have put in its place."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)
