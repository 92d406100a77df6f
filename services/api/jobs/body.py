"""The body of a submit (or dry run): Corral's native spec as JSON or YAML, or an OpenPAI
job protocol v2 document (``protocolVersion: 2``) in either, mapped to the native spec.

The route reads the body itself rather than letting FastAPI parse it as JSON, so one
endpoint takes every format; the OpenAPI document still describes both media types
(``OPENAPI_BODY``). The body is read with a bound of its own: ``BodySizeLimit`` only
sees a ``Content-Length``, and a chunked upload has none.

Every refusal is a problem document: 415 for a media type that is neither JSON nor
YAML, 400 for a body that does not parse (or is unsafe YAML: ``safe_yaml.py``), 422
naming each wrong field — as the user wrote it, so an OpenPAI error names the OpenPAI
field (``taskRoles.worker.resourcePerInstance.gpu``), never the native one.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request, Response
from pydantic import ValidationError

from services.api.jobs.idempotency import request_digest
from services.api.jobs.openpai import ProtocolInvalid, is_openpai, to_native
from services.api.jobs.safe_yaml import YamlRefused, load_yaml
from services.api.problems import ProblemSlug, describe_validation_errors
from shared.errors import CorralError, InvalidInput
from shared.jobs import JobSpec

JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")

OPENAPI_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "Corral's job spec (the schema) as JSON or YAML; or, instead, an OpenPAI job"
        " protocol v2 document (`protocolVersion: 2`) as YAML or JSON, mapped to it. Secrets of an"
        " OpenPAI job are never stored with it.",
        # The same document either way: a YAML body is a mapping, not a string.
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/JobSpec"}},
            "application/yaml": {"schema": {"$ref": "#/components/schemas/JobSpec"}},
        },
    }
}


class MalformedBody(CorralError):
    status = 400

    def __init__(self, problem_type: ProblemSlug, title: str, detail: str) -> None:
        super().__init__(detail)
        self.problem_type = problem_type
        self.title = title


class UnsupportedMediaType(CorralError):
    problem_type = "unsupported-media-type"
    status = 415
    title = "Unsupported media type"


class BodyTooLarge(CorralError):
    problem_type = "too-large"
    status = 413
    title = "Request body too large"


class SpecInvalid(InvalidInput):
    """A 422 with one entry per wrong field (``errors``), as FastAPI's own validation."""

    def __init__(self, what: str, errors: list[dict[str, str]]) -> None:
        summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        super().__init__(f"{what}: {summary}")
        self.problem_fields = {"errors": errors}


@dataclass(frozen=True)
class SubmittedJob:
    spec: JobSpec
    digest: str  # of the document as parsed (idempotency.py)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    openpai: bool = False
    # What the submitter is told about how Corral reads the document (an HTTP Warning).
    warnings: list[str] = field(default_factory=list)


def add_warnings(response: Response, warnings: list[str]) -> None:
    """Each warning as an HTTP ``Warning: 299 - "..."`` header, as the Kubernetes API
    server sends them (and ``corral submit`` prints them)."""
    for warning in warnings:
        text = re.sub(r"[\x00-\x1f\x7f]", " ", warning.replace('"', "'")).encode("ascii", "replace").decode()
        response.headers.append("Warning", f'299 - "{text}"')


async def read_job(request: Request, max_bytes: int) -> SubmittedJob:
    """The job a submit's body describes. Raises a ``CorralError`` (a problem) otherwise."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    is_json = media_type in JSON_TYPES or media_type.endswith("+json")
    if not is_json and media_type not in YAML_TYPES:
        raise UnsupportedMediaType(
            f"the body was sent as {media_type or 'no content type'!r}; send a job with"
            " 'Content-Type: application/json' or 'Content-Type: application/yaml'"
        )
    body = await _read_body(request, max_bytes)
    document = _parse_json(body) if is_json else await _parse_yaml(body)
    digest = request_digest(document)
    if is_openpai(document):
        try:
            mapped = to_native(document)
        except ProtocolInvalid as exc:
            errors = [{"field": ".".join(map(str, loc)) or "body", "message": msg} for loc, msg in exc.errors]
            raise SpecInvalid("the OpenPAI job (protocol v2) is not one Corral can run", errors) from None
        return SubmittedJob(mapped.spec, digest, mapped.secrets, openpai=True, warnings=mapped.warnings)
    try:
        return SubmittedJob(JobSpec.model_validate(document), digest)
    except ValidationError as exc:
        errors = describe_validation_errors([dict(e) for e in exc.errors()])
        raise SpecInvalid("the request does not match the schema", errors) from None


async def _read_body(request: Request, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge(f"the body may be at most {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, bad UTF-8, too deep
        raise MalformedBody(
            "malformed-json",
            "Malformed JSON",
            f"the request body is not valid JSON ({str(exc)[:200]}); send a JSON object",
        ) from None


async def _parse_yaml(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedBody("malformed-yaml", "Malformed YAML", "the YAML body is not UTF-8 text") from None
    try:
        # Parsing is CPU work proportional to the body (up to the size limit): off the loop.
        return await asyncio.to_thread(load_yaml, text)
    except YamlRefused as exc:
        raise MalformedBody(
            "malformed-yaml", "Malformed YAML", f"the YAML body was refused: {str(exc)[:300]}"
        ) from None
