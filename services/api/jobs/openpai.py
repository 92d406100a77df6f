"""OpenPAI job protocol v2, accepted unchanged and mapped to Corral's native ``JobSpec``.

The protocol is OpenPAI's (its rest-server's ``config/v2/protocol.js`` schema and
``middlewares/v2/protocol.js`` rendering); the models here follow that schema field by
field, with ``extra="forbid"`` so a field Corral does not carry out is a 422 that names
it rather than a setting silently ignored. What maps to what:

==========================================  ==================================================
OpenPAI v2                                  Corral
==========================================  ==================================================
``name``                                    ``name``, lower-cased
``taskRoles.<role>``                        ``tasks[]``, in document order, same name (it
                                            appears in ``PAI_*`` variables, so it is never
                                            renamed: it must already be a Corral name)
``instances``, ``resourcePerInstance``      ``instances``, ``resources.gpus/cpus/memory_mb``
``resourcePerInstance.ports``               ``ports`` (label → count, ``PAI_PORT_LIST_*``)
``commands`` (+ ``deployments`` pre/post)   ``command``: trimmed lines joined by newlines, as
                                            OpenPAI does, with ``<% $parameters.x %>`` filled in
``prerequisites``, a role's ``dockerImage``,  ``image``, ``fetch``, ``outputs``
``script``, ``data``, ``output``              (``openpai_prerequisites.py``)
``extraContainerOptions.shmMB``             ``shm_mb``: the size of the task's /dev/shm
``completion.minSucceededInstances``        ``completion.min_succeeded`` (null/-1: all)
``completion.minFailedInstances``           ``completion.min_failed`` (null: 1; -1: only when
                                            every instance failed)
``jobRetryCount``                           ``retry.max_retries``
``defaults.virtualCluster``                 ``virtual_cluster``
``extras``: runtime plugins (``ssh``,      ``ssh``, ``storage``, ``priority``,
``teamwise_storage``), ``hivedScheduler``,  ``resources.gpus/gpu_type``,
``gangAllocation``, ``corral``              ``allow_host_execution`` (``openpai_extras.py``)
==========================================  ==================================================

**Secrets.** ``<% $secrets.y %>`` is *not* filled in here (OpenPAI does not either: its
runtime does, in the container). The reference becomes ``${CORRAL_SECRET_Y}`` in the
stored command, and the value goes into ``api.job_secrets`` alone; the node agent (or
the Kubernetes runner) puts it into the task's environment when it starts the task. So
the value is never in ``api.jobs``, an event, a log line or an API response, and a secret
is expanded by the task's shell as a variable — never parsed as shell code, so a value
holding ``;`` or ``$(...)`` cannot inject commands. The one visible difference from
OpenPAI: inside single quotes a reference is not expanded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.api.jobs.openpai_extras import RUNTIME_PLUGINS, Extras, ExtrasInvalid, map_extras
from services.api.jobs.openpai_prerequisites import (
    Prerequisite,
    PrerequisiteInvalid,
    Prerequisites,
    fetches_of,
    reference_root,
)
from shared.jobs import NAME_PATTERN, JobSpec

SECRET_ENV_PREFIX = "CORRAL_SECRET_"  # noqa: S105  # a variable name prefix, not a secret
# <% $parameters.a.b %>, <% $secrets.list[0] %>, <% $script.uri %>: the template tokens
# OpenPAI renders (``$script``, ``$data`` and ``$output`` are the task role's own).
_TOKEN_RE = re.compile(r"<%\s*(.*?)\s*%>", re.DOTALL)
_REFERENCE_RE = re.compile(r"^\$(parameters|secrets|script|data|output)((?:\.[A-Za-z0-9_-]+|\[\d+\])+)$")
_ROLE_REFERENCES = ("script", "data", "output")
_PATH_PART_RE = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]")
MAX_SECRET_CHARS = 32_768
_NAME_RE = re.compile(NAME_PATTERN)

Int = Annotated[int, Field(strict=True)]  # YAML's 1.5 or "2" is not an instance count


# The models keep the protocol's camelCase field names, so an error names the field as
# the user wrote it.
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Completion(_Model):
    minFailedInstances: Int | None = None
    minSucceededInstances: Int | None = None


class ResourcePerInstance(_Model):
    cpu: Int
    memoryMB: Int
    gpu: Int
    ports: dict[str, Int] | None = None


class ExtraContainerOptions(_Model):
    shmMB: Int | None = Field(default=None, ge=1)
    infiniband: bool | None = None


class TaskRoleV2(_Model):
    protocolVersion: Literal[2, "2"] | None = None
    instances: Int = Field(default=1, ge=1)
    completion: Completion = Completion()
    taskRetryCount: Literal[0] | None = Field(
        default=None, description="Corral retries a job as a whole (jobRetryCount)"
    )
    prerequisites: list[str] | None = None
    dockerImage: str
    script: str | None = None
    data: str | None = None
    output: str | None = None
    extraContainerOptions: ExtraContainerOptions | None = None
    resourcePerInstance: ResourcePerInstance
    commands: list[str] = Field(min_length=1)


class DeploymentRole(_Model):
    preCommands: list[str] | None = Field(default=None, min_length=1)
    postCommands: list[str] | None = Field(default=None, min_length=1)


class Deployment(_Model):
    name: str
    protocolVersion: Literal[2, "2"] | None = None
    taskRoles: dict[str, DeploymentRole] = Field(min_length=1)


class Defaults(_Model):
    virtualCluster: str | None = None
    deployment: str | None = None


class JobProtocolV2(_Model):
    """An OpenPAI job, as its ``protocolVersion: 2`` YAML says."""

    protocolVersion: Literal[2, "2"]
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]+$", max_length=255)
    type: Literal["job"]
    version: str | float | None = None
    contributor: str | None = None
    description: str | None = None
    prerequisites: list[Prerequisite] = Field(default_factory=list)
    parameters: dict[str, Any] = Field(default_factory=dict)
    secrets: dict[str, Any] = Field(default_factory=dict)
    jobRetryCount: Int = Field(default=0, ge=0)
    taskRoles: dict[str, TaskRoleV2] = Field(min_length=1)
    deployments: list[Deployment] | None = Field(default=None, min_length=1)
    defaults: Defaults = Defaults()
    extras: Extras = Extras()


class ProtocolInvalid(ValueError):
    """The document breaks the protocol or asks for what Corral does not do; ``errors``
    name each field (``loc``, as the protocol spells it) with what to change."""

    def __init__(self, errors: list[tuple[tuple[str | int, ...], str]]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, loc))}: {msg}" for loc, msg in errors))
        self.errors = errors


def _refuse(loc: tuple[str | int, ...], message: str) -> NoReturn:
    raise ProtocolInvalid([(loc, message)])


def is_openpai(document: object) -> bool:
    return isinstance(document, dict) and "protocolVersion" in document


@dataclass(frozen=True)
class Mapped:
    """An OpenPAI document as Corral runs it: the native spec, the secrets its commands use
    (environment variable name → value, stored apart), and what the submitter should be
    told about the mapping (a field Corral reads differently than asked)."""

    spec: JobSpec
    secrets: dict[str, str]
    warnings: list[str]


def to_native(document: dict[str, Any]) -> Mapped:
    """The native spec of an OpenPAI v2 document. Raises ``ProtocolInvalid``."""
    try:
        job = JobProtocolV2.model_validate(document)
    except ValidationError as exc:
        raise ProtocolInvalid([(tuple(e["loc"]), _message(e)) for e in exc.errors()]) from None
    try:
        return _mapped(job)
    except (ExtrasInvalid, PrerequisiteInvalid) as exc:
        raise ProtocolInvalid([(exc.loc, str(exc))]) from None


def _mapped(job: JobProtocolV2) -> Mapped:
    _check_names(job)
    prerequisites = Prerequisites.check(job.prerequisites)
    deployment = _deployment(job)
    extras = map_extras(
        job.extras, {name: role.resourcePerInstance.gpu for name, role in job.taskRoles.items()}
    )
    secrets: dict[str, str] = {}
    tasks: list[dict[str, Any]] = []
    outputs: dict[str, dict[str, str]] = {}
    for role_name, role in job.taskRoles.items():
        at: tuple[str | int, ...] = ("taskRoles", role_name)
        lines = list(role.commands)
        if deployment is not None and role_name in deployment.taskRoles:
            extra = deployment.taskRoles[role_name]
            lines = (extra.preCommands or []) + lines + (extra.postCommands or [])
        command = "\n".join(line.strip() for line in lines)
        image = prerequisites.named(role.dockerImage, "dockerimage", (*at, "dockerImage"))
        script = role.script and prerequisites.named(role.script, "script", (*at, "script"))
        data = role.data and prerequisites.named(role.data, "data", (*at, "data"))
        output = role.output and prerequisites.named(role.output, "output", (*at, "output"))
        references: dict[str, Any] = {"parameters": job.parameters, "secrets": job.secrets}
        for kind, item in (("script", script), ("data", data)):
            if item:
                references[kind] = reference_root(item)
        if output:
            outputs[output.name] = {"name": output.name, "path": output.name}
            references["output"] = reference_root(output, "${CORRAL_OUTPUT_DIR}/" + output.name)
        task: dict[str, Any] = {
            "name": role_name,
            "instances": role.instances,
            "command": _render(command, references, secrets, (*at, "commands")),
            "image": image.uri,
            "resources": {
                "gpus": extras.gpus.get(role_name, role.resourcePerInstance.gpu),
                "cpus": role.resourcePerInstance.cpu,
                "memory_mb": role.resourcePerInstance.memoryMB,
            },
            "ports": role.resourcePerInstance.ports or {},
            "completion": _completion(role, at),
            "fetch": fetches_of(script or None, data or None),
        }
        if role_name in extras.gpu_types:
            task["resources"]["gpu_type"] = extras.gpu_types[role_name]
        task.update(_container_options(role, at))
        tasks.append(task)
    _check_references(job, prerequisites)
    native: dict[str, Any] = {
        "name": job.name.lower(),
        "tasks": tasks,
        "virtual_cluster": job.defaults.virtualCluster or "default",
        "retry": {"max_retries": job.jobRetryCount},
        "outputs": list(outputs.values()),
        **extras.job,
    }
    try:
        spec = JobSpec.model_validate(native)
    except ValidationError as exc:
        names = list(job.taskRoles)
        raise ProtocolInvalid([(_protocol_loc(e["loc"], names), _message(e)) for e in exc.errors()]) from None
    return Mapped(spec, secrets, extras.warnings)


def _container_options(role: TaskRoleV2, at: tuple[str | int, ...]) -> dict[str, Any]:
    options = role.extraContainerOptions
    if options is None:
        return {}
    if options.infiniband:
        _refuse(
            (*at, "extraContainerOptions", "infiniband"),
            "Corral does not pass InfiniBand devices into tasks; remove infiniband (NCCL then uses "
            "the network it finds)",
        )
    if options.shmMB is None:
        return {}
    if options.shmMB > role.resourcePerInstance.memoryMB:
        _refuse(
            (*at, "extraContainerOptions", "shmMB"),
            f"shmMB ({options.shmMB}) is more than the task's memory ({role.resourcePerInstance.memoryMB}"
            " MiB): /dev/shm is memory the task uses; raise resourcePerInstance.memoryMB or lower shmMB",
        )
    return {"shm_mb": options.shmMB}


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "Corral does not support this field of the OpenPAI protocol; remove it"
    if error["type"] == "missing":
        return "required field is missing"
    if tuple(error["loc"])[:1] == ("prerequisites",) and tuple(error["loc"])[-1:] == ("type",):
        return "a prerequisite's type is dockerimage, script, data or output"
    return str(error["msg"])


def _check_names(job: JobProtocolV2) -> None:
    if not _NAME_RE.match(job.name.lower()):
        _refuse(
            ("name",),
            "Corral needs a job name of at most 64 letters, digits, - and _, starting and ending"
            " with a letter or digit",
        )
    for role_name in job.taskRoles:
        if not _NAME_RE.match(role_name):
            _refuse(
                ("taskRoles", role_name),
                "Corral needs task role names in lower case (letters, digits, - and _, starting and"
                " ending with a letter or digit); the name is used as written in PAI_* variables,"
                " so rename the role",
            )


def _check_references(job: JobProtocolV2, prerequisites: Prerequisites) -> None:
    for role_name, role in job.taskRoles.items():
        for index, name in enumerate(role.prerequisites or []):
            if name not in prerequisites.by_name:
                _refuse(
                    ("taskRoles", role_name, "prerequisites", index), f"no prerequisite is named {name!r}"
                )


def _deployment(job: JobProtocolV2) -> Deployment | None:
    by_name: dict[str, Deployment] = {}
    for index, item in enumerate(job.deployments or []):
        if item.name in by_name:
            _refuse(("deployments", index, "name"), f"deployment {item.name!r} is given twice")
        for role_name in item.taskRoles:
            if role_name not in job.taskRoles:
                _refuse(("deployments", index, "taskRoles", role_name), "no task role has this name")
        by_name[item.name] = item
    chosen = job.defaults.deployment
    if chosen is None:
        return None
    if chosen not in by_name:
        _refuse(("defaults", "deployment"), f"no deployment is named {chosen!r}")
    return by_name[chosen]


def _completion(role: TaskRoleV2, at: tuple[str | int, ...]) -> dict[str, int]:
    completion: dict[str, int] = {}
    succeeded, failed = role.completion.minSucceededInstances, role.completion.minFailedInstances
    if succeeded is not None and succeeded != -1:
        if succeeded < 1:
            _refuse((*at, "completion", "minSucceededInstances"), "must be -1, null or >= 1")
        completion["min_succeeded"] = succeeded
    if failed == -1:
        completion["min_failed"] = role.instances
    elif failed is not None:
        if failed < 1:
            _refuse((*at, "completion", "minFailedInstances"), "must be -1, null or >= 1")
        completion["min_failed"] = failed
    return completion


def _render(
    command: str, references: dict[str, Any], secrets: dict[str, str], at: tuple[str | int, ...]
) -> str:
    """Fill in parameters and the role's script, data and output; turn secret references
    into environment variable references (recording name → value in ``secrets``). Unknown
    references are errors (OpenPAI would leave ``<% ... %>`` in the command, for the shell
    to choke on)."""

    def replace(match: re.Match[str]) -> str:
        reference = match.group(1)
        parsed = _REFERENCE_RE.match(reference)
        if parsed is None:
            _refuse(
                at,
                f"'<% {reference[:60]} %>' is not a reference Corral fills in; use <% $parameters.x %>,"
                " <% $secrets.x %>, or the role's <% $script.x %>, <% $data.x %>, <% $output.x %>",
            )
        kind, path = parsed.group(1), parsed.group(2)
        if kind in _ROLE_REFERENCES and kind not in references:
            _refuse(at, f"refers to ${kind}{path}, but the task role names no {kind} prerequisite")
        value = _lookup(references[kind], path)
        if value is None:
            _refuse(at, f"refers to ${kind}{path}, which `{kind}` does not define")
        if kind != "secrets":
            return value
        if "\x00" in value or len(value) > MAX_SECRET_CHARS:
            _refuse(("secrets",), f"${kind}{path} is longer than {MAX_SECRET_CHARS} characters or holds NUL")
        env_name = SECRET_ENV_PREFIX + re.sub(r"[^A-Za-z0-9_]", "_", path.lstrip(".")).upper()
        if secrets.setdefault(env_name, value) != value:
            _refuse(("secrets",), f"two secrets are both named {env_name}; rename one")
        return "${" + env_name + "}"

    return _TOKEN_RE.sub(replace, command)


def _lookup(root: dict[str, Any], path: str) -> str | None:
    """The value at a ``.a.b[0]`` path, as text the way OpenPAI (JavaScript) prints it;
    None when it is missing, null, or not a single value."""
    node: Any = root
    for name, index in _PATH_PART_RE.findall(path):
        if name and isinstance(node, dict) and name in node:
            node = node[name]
        elif index and isinstance(node, list) and int(index) < len(node):
            node = node[int(index)]
        elif name.isdigit() and isinstance(node, list) and int(name) < len(node):
            node = node[int(name)]
        else:
            return None
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, float) and node.is_integer():
        return str(int(node))
    if isinstance(node, str | int | float):
        return str(node)
    return None


_NATIVE_TO_PROTOCOL: dict[tuple[str, ...], tuple[str, ...]] = {
    ("instances",): ("instances",),
    ("command",): ("commands",),
    ("image",): ("dockerImage",),
    ("resources", "gpus"): ("resourcePerInstance", "gpu"),
    ("resources", "cpus"): ("resourcePerInstance", "cpu"),
    ("resources", "memory_mb"): ("resourcePerInstance", "memoryMB"),
    ("resources", "gpu_type"): ("skuType",),
    ("ports",): ("resourcePerInstance", "ports"),
    ("completion", "min_succeeded"): ("completion", "minSucceededInstances"),
    ("completion", "min_failed"): ("completion", "minFailedInstances"),
    ("shm_mb",): ("extraContainerOptions", "shmMB"),
    ("fetch",): ("prerequisites",),
}
_TOP_TO_PROTOCOL: dict[str, tuple[str, ...]] = {
    "name": ("name",),
    "tasks": ("taskRoles",),
    "virtual_cluster": ("defaults", "virtualCluster"),
    "priority": ("extras", "hivedScheduler", "jobPriorityClass"),
    "retry": ("jobRetryCount",),
    "ssh": ("extras", RUNTIME_PLUGINS),
    "storage": ("extras", RUNTIME_PLUGINS),
    "outputs": ("prerequisites",),
    "allow_host_execution": ("extras", "corral", "allowHostExecution"),
}


def _protocol_loc(loc: tuple[str | int, ...], roles: list[str]) -> tuple[str | int, ...]:
    """Where a native-spec error is in the OpenPAI document (``tasks.0.resources.gpus``
    → ``taskRoles.worker.resourcePerInstance.gpu``)."""
    if len(loc) >= 2 and loc[0] == "tasks" and isinstance(loc[1], int) and loc[1] < len(roles):
        role = roles[loc[1]]
        rest = tuple(str(part) for part in loc[2:])
        if rest and rest[0] == "name":
            return ("taskRoles", role)
        for native, protocol in _NATIVE_TO_PROTOCOL.items():
            if rest[: len(native)] == native:
                if protocol == ("skuType",):
                    return ("extras", "hivedScheduler", "taskRoles", role, "skuType")
                return ("taskRoles", role, *protocol, *rest[len(native) :])
        return ("taskRoles", role, *rest)
    if loc and str(loc[0]) in _TOP_TO_PROTOCOL:
        return _TOP_TO_PROTOCOL[str(loc[0])]
    return loc
