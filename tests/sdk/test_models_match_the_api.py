"""The SDK's models agree with the API's committed OpenAPI document (docs/api/openapi.json).

The SDK keeps copies of the API's answers rather than importing them (corral/sdk/models/
base.py says why), so nothing but this test notices when the two drift apart. For each
SDK model and the schema it mirrors: every field it declares is one the API sends, a
field it requires is one the API always sends, and its type takes every JSON value the
API's may be (an ``int`` field where the API may send ``null`` or ``2.5`` would fail on
the first such answer). Fields the API adds and the SDK does not read are fine: the
models keep them (``extra="allow"``).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from corral.sdk import models
from corral.sdk.models.base import Model
from corral.sdk.models.cluster import JoinedDatabase, JoinedNats
from corral.sdk.models.registry import (
    Artifact,
    ArtifactDetail,
    ArtifactFile,
    ModelVersion,
    ModelVersionDetail,
    PinnedInput,
    RegisteredModel,
    RegisteredModelDetail,
    RegisteredModelPage,
)
from corral.sdk.models.serving import Service, ServiceReplica
from tests.openapi_snapshot import SNAPSHOT

# SDK model -> the API schema it mirrors.
MIRRORS: dict[type[BaseModel], str] = {
    models.Alert: "AlertView",
    models.AlertActionAccepted: "AlertActionAccepted",
    models.AlertDetail: "AlertDetail",
    models.AlertRules: "RulesView",
    models.Attempt: "AttemptView",
    models.BusCredentials: "BusCredentials",
    models.Delivery: "DeliveryView",
    models.DeliveryAttempt: "DeliveryAttemptView",
    models.DrainAccepted: "DrainAccepted",
    models.DryRun: "DryRunView",
    models.DryRunPlacement: "DryRunPlacement",
    models.Gpu: "GpuView",
    models.GpuHistory: "GpuHistory",
    models.Group: "GroupView",
    models.HealthEvent: "HealthEventView",
    models.HistoryPoint: "HistoryPoint",
    models.InteractiveSession: "SessionCreated",
    models.Job: "JobView",
    models.JobPage: "JobList",
    models.JoinToken: "JoinTokenCreated",
    models.Joined: "Joined",
    JoinedDatabase: "JoinedDatabase",
    JoinedNats: "JoinedNats",
    models.Matcher: "Matcher",
    models.Node: "NodeView",
    models.NodeDetail: "NodeDetail",
    models.NodeRemoved: "NodeRemoved",
    models.Pending: "PendingView",
    models.RedeliveryAccepted: "RedeliveryAccepted",
    models.SecretRotated: "SecretRotated",
    models.ServiceInstance: "ServiceInstanceView",
    models.ServicesOverview: "ServiceInstanceList",
    models.Silence: "SilenceView",
    models.SilenceAccepted: "SilenceAccepted",
    models.SupervisedProcess: "SupervisedProcessView",
    models.Token: "TokenView",
    models.TokenCreated: "TokenCreated",
    models.Transition: "TransitionView",
    models.Usage: "Usage",
    models.User: "UserView",
    models.VirtualCluster: "VirtualClusterView",
    models.Webhook: "WebhookView",
    models.WebhookCreated: "WebhookCreated",
    models.WhoAmI: "WhoAmI",
    Artifact: "ArtifactSummary",
    ArtifactDetail: "ArtifactView",
    ArtifactFile: "ArtifactFile",
    ModelVersion: "VersionView",
    ModelVersionDetail: "VersionDetail",
    PinnedInput: "InputView",
    RegisteredModel: "ModelSummary",
    RegisteredModelDetail: "ModelView",
    RegisteredModelPage: "ModelList",
    Service: "ServiceView",
    ServiceReplica: "ReplicaView",
}
# Models that mirror no one schema: ``Detail`` is every answer that is only a sentence.
MIRRORS_NOTHING = {models.Detail}
JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object", "null"}


def _document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(SNAPSHOT.read_text())
    return document


def _models() -> set[type[Model]]:
    """Every model of the SDK, exported or nested in one that is."""
    found: set[type[Model]] = set()
    pending = list(Model.__subclasses__())
    while pending:
        cls = pending.pop()
        found.add(cls)
        pending += cls.__subclasses__()
    return found


def _ref(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _alternatives(schema: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The schemas a value may match: ``anyOf``/``oneOf``, type lists and enums flattened,
    a reference to anything but an object (an enum) followed."""
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [alt for part in schema[key] for alt in _alternatives(part, defs)]
    ref = _ref(schema)
    if ref is not None and defs[ref].get("type") != "object":
        return _alternatives(defs[ref], defs)
    if isinstance(schema.get("type"), list):
        return [{**schema, "type": t} for t in schema["type"]]
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        return [{"type": _json_type(v)} for v in values]
    return [schema]


def _json_type(value: object) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "boolean"
        case int():
            return "integer"
        case float():
            return "number"
        case str():
            return "string"
        case list():
            return "array"
    return "object"


def _kind(schema: dict[str, Any]) -> str:
    """A schema's JSON type: a reference (left) is an object, no type at all takes anything."""
    if _ref(schema) is not None:
        return "object"
    kind = schema.get("type")
    return kind if isinstance(kind, str) else "any"


MIRRORED_BY_NAME = {sdk_class.__name__: name for sdk_class, name in MIRRORS.items()}


def _disagreements(
    sdk: dict[str, Any], api: dict[str, Any], at: str, sdk_defs: dict[str, Any], api_defs: dict[str, Any]
) -> list[str]:
    """Where a value the API may send (``api``) would not fit the SDK's field (``sdk``)."""
    by_kind: dict[str, dict[str, Any]] = {_kind(s): s for s in _alternatives(sdk, sdk_defs)}
    if "any" in by_kind:
        return []
    problems = []
    for sent in _alternatives(api, api_defs):
        kind = _kind(sent)
        taken = by_kind.get(kind) or (by_kind.get("number") if kind == "integer" else None)
        if taken is None:
            problems.append(f"{at}: the API may send {kind}, the SDK takes {sorted(by_kind)}")
            continue
        sdk_ref, api_ref = _ref(taken), _ref(sent)
        if api_ref is not None and sdk_ref is not None:
            if MIRRORED_BY_NAME.get(sdk_ref) != api_ref:
                problems.append(f"{at}: the SDK's {sdk_ref} does not mirror the API's {api_ref}")
        elif kind == "array":
            problems += _disagreements(
                taken.get("items", {}), sent.get("items", {}), f"{at}[]", sdk_defs, api_defs
            )
        elif kind == "object" and isinstance(sent.get("additionalProperties"), dict):
            values = taken.get("additionalProperties", {})
            if isinstance(values, dict):
                problems += _disagreements(
                    values, sent["additionalProperties"], f"{at}{{}}", sdk_defs, api_defs
                )
    return problems


def test_every_sdk_model_is_mapped_to_what_it_mirrors() -> None:
    unmapped = (
        {m.__name__ for m in _models()}
        - {m.__name__ for m in MIRRORS}
        - {m.__name__ for m in MIRRORS_NOTHING}
    )
    assert not unmapped, f"say which API schema these SDK models mirror (MIRRORS): {sorted(unmapped)}"
    schemas = _document()["components"]["schemas"]
    assert not {name for name in MIRRORS.values() if name not in schemas}


def test_every_sdk_model_agrees_with_the_schema_it_mirrors() -> None:
    schemas = _document()["components"]["schemas"]
    problems: list[str] = []
    for sdk_class, name in sorted(MIRRORS.items(), key=lambda item: item[0].__name__):
        sdk_schema = sdk_class.model_json_schema()
        sdk_defs = sdk_schema.get("$defs", {})
        api = schemas[name]
        api_required = set(api.get("required", []))
        for field, sdk_field in sdk_schema.get("properties", {}).items():
            at = f"{sdk_class.__name__}.{field} ({name})"
            if field not in api.get("properties", {}):
                problems.append(f"{at}: the API sends no such field")
                continue
            if field in sdk_schema.get("required", []) and field not in api_required:
                problems.append(f"{at}: the SDK requires it, the API may leave it out")
            problems += _disagreements(sdk_field, api["properties"][field], at, sdk_defs, schemas)
    assert not problems, "the SDK's models and the API disagree:\n" + "\n".join(problems)


def test_the_comparison_sees_a_disagreement() -> None:
    """Not vacuous: a nullable API field in a non-nullable SDK field, an integer where the
    SDK takes text, and a list of the wrong thing are all found."""

    def differ(sdk: dict[str, Any], api: dict[str, Any]) -> bool:
        return bool(_disagreements(sdk, api, "f", {}, {}))

    integer, text, nothing = {"type": "integer"}, {"type": "string"}, {"type": "null"}
    assert differ(integer, {"anyOf": [integer, nothing]})
    assert differ(text, integer)
    assert differ({"type": "array", "items": text}, {"type": "array", "items": integer})
    assert not differ({"type": "number"}, integer)
    assert not differ({"anyOf": [text, nothing]}, text)
