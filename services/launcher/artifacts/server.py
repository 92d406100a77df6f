"""The launcher answers nodes' artifact requests (``shared/artifacts/transport.py``):
uploads of what a task left, downloads of what a task reads.

Every request is checked against the asking node's own attempts: NATS lets a node ask
only on its own subjects, so the subject's node is the asker, and an attempt that is
not that node's is refused whatever else the request says. A node may upload for any
attempt of its own whose job declares outputs, and read only the blobs of a live
attempt of its own: its job's inputs and its task's earlier outputs (its checkpoint).

Concurrency model: requests are answered concurrently, each in a task of the server's
TaskGroup, at most ``CONCURRENCY`` at once, so one slow store call (a large blob put
into S3) does not hold up every other node's requests. A node sends one blob's chunks
one after another, each after the previous reply, so a blob's chunks never race. What
an attempt may read and whose it is are remembered for ``CACHE_S`` (a download asks
per 512 KiB chunk; the database is asked once per attempt and period).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from services.launcher.artifacts.repository import ArtifactRecords, AttemptRow
from services.launcher.artifacts.staging import Staging, UploadRefused
from shared.artifacts import transport
from shared.artifacts.manifest import check_sha256, parse_canonical
from shared.artifacts.store import ArtifactStore, StoreError
from shared.artifacts.transport import (
    CHUNK_BYTES,
    MAX_REPLY_BYTES,
    BlobRequest,
    CompleteRequest,
    InputsReply,
    InputsRequest,
    MissingReply,
    MissingRequest,
    PlacedInput,
    Reply,
    UploadReply,
)
from shared.db.pool import DATABASE_ERRORS
from shared.jobs import JobSpec

log = logging.getLogger(__name__)
CONCURRENCY = 32
CACHE_S = 10.0


class Refused(Exception):
    """The request is not this node's to make; the message says why."""


class ArtifactServer:
    def __init__(
        self, records: ArtifactRecords, store: ArtifactStore, staging: Staging, *, max_blob_bytes: int
    ) -> None:
        self._records = records
        self._max_blob_bytes = max_blob_bytes  # (a task's whole output may be no larger)
        self._store = store
        self._staging = staging
        self._attempts: dict[str, tuple[float, AttemptRow]] = {}
        self._readable: dict[str, tuple[float, frozenset[str]]] = {}

    async def serve(self, nc: Any) -> None:
        """Answer on every node's artifact subjects until cancelled."""
        slots = asyncio.Semaphore(CONCURRENCY)
        async with asyncio.TaskGroup() as tg:

            async def received(msg: Any) -> None:
                await slots.acquire()
                tg.create_task(self._answer_released(nc, msg, slots.release))

            subscription = await nc.subscribe(transport.ALL_NODES, queue=transport.QUEUE, cb=received)
            try:
                await asyncio.Event().wait()
            finally:
                try:
                    await subscription.unsubscribe()
                except Exception:  # the connection may be closing already
                    log.debug("artifact subscription already gone")

    async def _answer_released(self, nc: Any, msg: Any, release: Callable[[], None]) -> None:
        try:
            payload, headers = await self.answer(msg.subject, msg.data, msg.headers or {})
            if msg.reply:
                await nc.publish(msg.reply, payload, headers=headers)
        except Exception:
            log.exception("could not answer an artifact request on %s", msg.subject)
        finally:
            release()

    async def answer(
        self, subject: str, data: bytes, headers: dict[str, str]
    ) -> tuple[bytes, dict[str, str] | None]:
        """The reply (payload, headers) to one request."""
        parsed = transport.parse_subject(subject)
        if parsed is None:
            return _refusal(f"{subject} is not an artifact subject")
        node_id, verb = parsed
        handlers: dict[
            str, Callable[[str, bytes, dict[str, str]], Awaitable[tuple[bytes, dict[str, str] | None]]]
        ]
        handlers = {
            "missing": self._missing,
            "upload": self._upload,
            "complete": self._complete,
            "inputs": self._inputs,
            "blob": self._blob,
        }
        try:
            return await handlers[verb](node_id, data, headers)
        except Refused as exc:
            log.warning("refused node %s's artifact %s: %s", node_id, verb, exc)
            return _refusal(str(exc))
        except (ValidationError, ValueError) as exc:
            return _refusal(f"malformed {verb} request: {exc}")
        except UploadRefused as exc:
            return _refusal(str(exc))
        except StoreError as exc:
            log.warning("artifact %s for node %s: %s", verb, node_id, exc)
            return _refusal(f"the launcher's artifact store failed: {exc}", passing=True)
        except DATABASE_ERRORS as exc:
            return _refusal(f"the launcher could not reach its database: {exc}", passing=True)

    # --- checks ----------------------------------------------------------------------

    async def _own_attempt(self, node_id: str, attempt_id: str) -> AttemptRow:
        cached = self._attempts.get(attempt_id)
        now = time.monotonic()
        if cached is not None and now - cached[0] < CACHE_S:
            attempt = cached[1]
        else:
            found = await self._records.attempt(attempt_id)
            if found is None:
                raise Refused(f"there is no attempt {attempt_id}")
            attempt = found
            if len(self._attempts) > 10_000:
                self._attempts.clear()
            self._attempts[attempt_id] = (now, attempt)
        if attempt.node_id != node_id:
            raise Refused(f"attempt {attempt_id} is not node {node_id}'s")
        return attempt

    async def _uploading(self, node_id: str, attempt_id: str) -> AttemptRow:
        attempt = await self._own_attempt(node_id, attempt_id)
        if not JobSpec.model_validate(attempt.spec).outputs:
            raise Refused(
                f"job {attempt.job_id} declares no outputs; attempt {attempt_id} has none to upload"
            )
        return attempt

    async def _readable_blobs(self, node_id: str, attempt_id: str) -> frozenset[str]:
        cached = self._readable.get(attempt_id)
        now = time.monotonic()
        if cached is not None and now - cached[0] < CACHE_S:
            await self._own_attempt(node_id, attempt_id)
            return cached[1]
        self._attempts.pop(attempt_id, None)  # (its state too is read afresh)
        attempt = await self._own_attempt(node_id, attempt_id)
        if not attempt.live:
            raise Refused(f"attempt {attempt_id} is {attempt.state}: its inputs are no longer to be read")
        placed = await self._placed(attempt)
        readable = frozenset(
            entry.sha256
            for manifest in (*(i.manifest for i in placed.inputs), placed.checkpoint or [])
            for entry in manifest
        )
        if len(self._readable) > 10_000:
            self._readable.clear()
        self._readable[attempt_id] = (now, readable)
        return readable

    async def _placed(self, attempt: AttemptRow) -> InputsReply:
        spec = JobSpec.model_validate(attempt.spec)
        inputs: list[PlacedInput] = []
        if spec.inputs:
            pinned = await self._records.job_inputs(attempt.job_id)
            if len(pinned) != len(spec.inputs):
                raise Refused(
                    f"job {attempt.job_id} has {len(spec.inputs)} inputs, {len(pinned)} of them pinned"
                )
            for stored in pinned:
                if stored.manifest is None:
                    raise Refused(f"input {stored.ref} of job {attempt.job_id} has no artifact any more")
                inputs.append(PlacedInput(ref=stored.ref, path=stored.path, manifest=stored.manifest))
        checkpoint = await self._records.checkpoint(attempt) if spec.outputs else None
        return InputsReply(inputs=inputs, checkpoint=checkpoint)

    # --- verbs -----------------------------------------------------------------------

    async def _missing(
        self, node_id: str, data: bytes, _: dict[str, str]
    ) -> tuple[bytes, dict[str, str] | None]:
        request = MissingRequest.model_validate_json(data)
        await self._uploading(node_id, request.attempt_id)
        missing = [
            sha for sha in dict.fromkeys(map(check_sha256, request.sha256s)) if not await self._store.has(sha)
        ]
        return _json(MissingReply(missing=missing))

    async def _upload(
        self, node_id: str, data: bytes, headers: dict[str, str]
    ) -> tuple[bytes, dict[str, str] | None]:
        attempt_id = headers.get(transport.ATTEMPT, "")
        sha256 = check_sha256(headers.get(transport.SHA256, ""))
        offset, size = int(headers.get(transport.OFFSET, "")), int(headers.get(transport.SIZE, ""))
        if offset < 0 or size < 0 or len(data) > CHUNK_BYTES:
            raise ValueError(f"offset {offset}, size {size} and a chunk of at most {CHUNK_BYTES} bytes")
        if size > self._max_blob_bytes:
            raise Refused(
                f"a blob of {size} bytes is larger than a task's outputs may be ({self._max_blob_bytes})"
            )
        await self._uploading(node_id, attempt_id)
        whole = await self._staging.write(attempt_id, sha256, offset, size, data)
        if whole is None:
            return _json(UploadReply())
        try:
            await self._store.put(sha256, whole)
        finally:
            await self._staging.discard(whole)
        return _json(UploadReply(stored=True))

    async def _complete(
        self, node_id: str, data: bytes, _: dict[str, str]
    ) -> tuple[bytes, dict[str, str] | None]:
        request = CompleteRequest.model_validate_json(data)
        attempt = await self._uploading(node_id, request.attempt_id)
        entries = parse_canonical(await self._whole(request.manifest_sha256), request.manifest_sha256)
        for entry in entries:
            stored = await self._store.size(entry.sha256)
            if stored is None:
                raise Refused(
                    f"{entry.path} (blob {entry.sha256}) was not uploaded; send it, then complete again"
                )
            if stored != entry.size:
                raise Refused(f"{entry.path} is said to be {entry.size} bytes, but its blob is {stored}")
        await self._records.record_task_outputs(attempt, entries)
        log.info("attempt %s left %d file(s) in its output directory", request.attempt_id, len(entries))
        return _json(Reply())

    async def _whole(self, sha256: str) -> bytes:
        """A stored blob (a manifest), read whole."""
        size = await self._store.size(sha256)
        if size is None:
            raise Refused(f"the manifest (blob {sha256}) was not uploaded; send it, then complete again")
        parts = []
        for offset in range(0, size, 8 * CHUNK_BYTES):
            parts.append(await self._store.read(sha256, offset, 8 * CHUNK_BYTES))
        return b"".join(parts)

    async def _inputs(
        self, node_id: str, data: bytes, _: dict[str, str]
    ) -> tuple[bytes, dict[str, str] | None]:
        request = InputsRequest.model_validate_json(data)
        self._attempts.pop(request.attempt_id, None)
        attempt = await self._own_attempt(node_id, request.attempt_id)
        if not attempt.live:
            raise Refused(f"attempt {request.attempt_id} is {attempt.state}: it will not start")
        placed = await self._placed(attempt)
        reply = placed.model_dump_json().encode()
        if len(reply) > MAX_REPLY_BYTES:
            files = sum(len(i.manifest) for i in placed.inputs) + len(placed.checkpoint or [])
            raise Refused(
                f"its inputs and checkpoint list {files} files, more than a node can be sent at once; "
                "pack them into fewer files (an archive, a few shards)"
            )
        return reply, None

    async def _blob(
        self, node_id: str, _: bytes, headers: dict[str, str]
    ) -> tuple[bytes, dict[str, str] | None]:
        request = BlobRequest(
            attempt_id=headers.get(transport.ATTEMPT, ""),
            sha256=headers.get(transport.SHA256, ""),
            offset=int(headers.get(transport.OFFSET, "0")),
        )
        if request.sha256 not in await self._readable_blobs(node_id, request.attempt_id):
            raise Refused(
                f"blob {request.sha256} is not an input or a checkpoint of attempt {request.attempt_id}"
            )
        size = await self._store.size(request.sha256)
        if size is None:
            raise Refused(f"blob {request.sha256} is not in the store")
        chunk = await self._store.read(request.sha256, request.offset, CHUNK_BYTES)
        return chunk, {transport.SIZE: str(size)}


def _json(reply: BaseModel) -> tuple[bytes, dict[str, str] | None]:
    return reply.model_dump_json().encode(), None


def _refusal(why: str, *, passing: bool = False) -> tuple[bytes, dict[str, str] | None]:
    headers = {transport.ERROR: why[:1000]}
    if passing:
        headers[transport.RETRY] = "1"
    return Reply(error=why).model_dump_json().encode(), headers
