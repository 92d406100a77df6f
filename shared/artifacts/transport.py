"""How a node moves artifact bytes: core NATS request/reply with the launcher on
``corral.artifacts.<node>.<verb>``, the launcher answering in queue group
``launcher-artifacts``.

Nodes never hold store credentials (DESIGN §11: a node is less trusted than the control
plane). NATS lets a node publish only on its own node's subjects
(``shared/bus/identities.py``), so the node named in the subject is the one asking, and
the launcher checks every request against that node's own attempts.

Verbs (``VERBS``):

- ``missing``: ``MissingRequest`` → ``MissingReply``: which of these blobs the store
  lacks (an upload sends only those: a restarted agent resumes where it stopped).
- ``upload``: one chunk of a blob, raw bytes as the payload (``CHUNK_BYTES`` at most),
  the attempt, blob, offset and whole size in headers. The chunk that completes the blob
  makes the launcher verify its sha256 and store it. → ``UploadReply``.
- ``complete``: ``CompleteRequest`` → ``Reply``: the task's output manifest, uploaded
  as a blob itself (its canonical JSON, so a manifest of any number of files fits), and
  every blob it names are stored; the launcher records it (``launcher.task_outputs``).
- ``inputs``: ``InputsRequest`` → ``InputsReply``: the manifests of an attempt's inputs
  and the outputs its task left in an earlier attempt (restored before it starts).
- ``blob``: one chunk of a blob the attempt may read, raw bytes as the reply's payload,
  its size (``SIZE``) or a refusal (``ERROR``) in the reply's headers.

A refusal says why (``error``); the asker does not retry a refusal, only silence and a
failure the launcher marks as passing (``RETRY``: its store or database was away).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from shared.artifacts.manifest import SHA256_PATTERN, ManifestEntry

SUBJECT_PREFIX = "corral.artifacts"
QUEUE = "launcher-artifacts"
# A NATS message is 1 MiB at most by default; half of it leaves room for the headers.
CHUNK_BYTES = 512 * 1024
VERBS = ("missing", "upload", "complete", "inputs", "blob")
# Blobs asked about in one ``missing`` request: 4096 hex digests are ~280 KB of JSON.
MISSING_BATCH = 4096
# A reply the launcher sends (``inputs``) stays below NATS's default 1 MiB limit.
MAX_REPLY_BYTES = 900 * 1024

# Headers of ``upload`` requests and ``blob`` requests and replies.
ATTEMPT = "Corral-Attempt"
SHA256 = "Corral-Sha256"
OFFSET = "Corral-Offset"
SIZE = "Corral-Size"
ERROR = "Corral-Error"
# With ERROR: the launcher could not do it now (its store or database is away), not a
# refusal; the asker tries again.
RETRY = "Corral-Retry"


def subject(node_id: str, verb: str) -> str:
    if verb not in VERBS:
        raise ValueError(f"unknown artifact verb {verb!r}; verbs are {', '.join(VERBS)}")
    if not node_id or any(c in node_id for c in ".*> \t\r\n"):
        raise ValueError(f"{node_id!r} is not a node id (no dots, wildcards or spaces)")
    return f"{SUBJECT_PREFIX}.{node_id}.{verb}"


def node_subjects(node_id: str) -> str:
    """Every subject a node may ask on (its NATS permission)."""
    return f"{SUBJECT_PREFIX}.{node_id}.>"


ALL_NODES = f"{SUBJECT_PREFIX}.*.>"


def parse_subject(value: str) -> tuple[str, str] | None:
    """(node, verb) of a request's subject; None for anything else."""
    parts = value.split(".")
    if len(parts) != 4 or ".".join(parts[:2]) != SUBJECT_PREFIX or parts[3] not in VERBS:
        return None
    return parts[2], parts[3]


class Reply(BaseModel):
    """``error`` set: refused or failed, and nothing else in the reply is meaningful."""

    model_config = ConfigDict(extra="ignore")

    error: str | None = None


class MissingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt_id: str = Field(max_length=64)
    sha256s: list[str] = Field(max_length=MISSING_BATCH)


class MissingReply(Reply):
    missing: list[str] = Field(default_factory=list)


class UploadReply(Reply):
    stored: bool = Field(default=False, description="this chunk completed the blob, verified and stored")


class CompleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt_id: str = Field(max_length=64)
    manifest_sha256: str = Field(pattern=SHA256_PATTERN, description="the manifest's blob")


class InputsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt_id: str = Field(max_length=64)


class PlacedInput(BaseModel):
    """One input of the attempt's job: where it lands under ``$CORRAL_INPUT_DIR``, what
    it holds, and its reference (for messages)."""

    ref: str
    path: str
    manifest: list[ManifestEntry]


class InputsReply(Reply):
    inputs: list[PlacedInput] = Field(default_factory=list)
    # What the same task (job, role, index) left in its latest earlier attempt.
    checkpoint: list[ManifestEntry] | None = None


class BlobRequest(BaseModel):
    """(in headers: ``ATTEMPT``, ``SHA256``, ``OFFSET``)"""

    attempt_id: str
    sha256: str = Field(pattern=SHA256_PATTERN)
    offset: int = Field(ge=0)
