"""OpenPAI's ``extras``: runtime plugins, HiveD's fields and Corral's own, each mapped to
the native spec or refused with the reason. Part of the OpenPAI mapping (``openpai.py``).

==================================================  ==============================================
OpenPAI                                             Corral
==================================================  ==============================================
``com.microsoft.pai.runtimeplugin``: ``ssh``        ``ssh``: ``jobssh`` → ``between_tasks``,
                                                    ``sshbarrier`` → ``barrier``,
                                                    ``sshbarrierTimeout`` (minutes) →
                                                    ``barrier_timeout_s``, ``userssh`` (``custom``:
                                                    a public key; ``system``: the name of a key the
                                                    user keeps in Corral) → ``authorized_keys`` /
                                                    ``user_keys``
``com.microsoft.pai.runtimeplugin``:                ``storage``: each of ``storageConfigNames``,
``teamwise_storage``                                mounted at ``/mnt/NAME``
a plugin's ``taskroles``, ``sshbarriertaskroles``   accepted with a warning: Corral applies ssh and
                                                    storage to every task role of a job
a plugin's ``failurePolicy``                        ``fail`` (OpenPAI's default) is what Corral
                                                    does; ``ignore`` is accepted with a warning
any other plugin                                    refused, by name
``hivedScheduler.jobPriorityClass``                 ``priority``: oppo -100, test 0, prod 100,
                                                    crit 200
``hivedScheduler.taskRoles.R.skuType``              ``resources.gpu_type`` (``gpuType``, its older
                                                    name, alike)
``hivedScheduler.taskRoles.R.skuNum``               ``resources.gpus`` (``gpuNumber`` alike); it
                                                    wins over ``resourcePerInstance.gpu``, as in
                                                    HiveD, with a warning when they differ
``hivedScheduler.taskRoles.R.affinityGroupName``    accepted: Corral places a job's tasks as one
                                                    gang, packed onto the fewest nodes
``hivedScheduler.taskRoles.R.pinnedCellId``         refused: Corral has no physical cells to pin
``gangAllocation``                                  accepted: every job is one gang
``corral.allowHostExecution``                       ``allow_host_execution``
==================================================  ==============================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field

RUNTIME_PLUGINS = "com.microsoft.pai.runtimeplugin"
PRIORITY_CLASSES = {"oppo": -100, "test": 0, "prod": 100, "crit": 200}
# sshbarrierTimeout's unit and default, as OpenPAI's ssh plugin has them.
SSH_BARRIER_DEFAULT_MIN = 30.0
_MAX_BARRIER_MIN = 60.0  # Corral's barrier waits at most an hour (shared/ssh_spec.py)

Int = Annotated[int, Field(strict=True)]
Loc = tuple[str | int, ...]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HivedRole(_Model):
    skuType: str | None = None
    skuNum: Int | None = Field(default=None, ge=0)
    gpuType: str | None = None
    gpuNumber: Int | None = Field(default=None, ge=0)
    affinityGroupName: str | None = None
    pinnedCellId: str | None = None


class Hived(_Model):
    jobPriorityClass: Literal["oppo", "test", "prod", "crit"] | None = None
    taskRoles: dict[str, HivedRole] | None = None


class UserSsh(_Model):
    type: Literal["custom", "system"]
    value: str


class RuntimePlugin(_Model):
    plugin: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    failurePolicy: Literal["fail", "ignore"] | None = None
    taskroles: list[str] | None = None


class CorralExtras(_Model):
    allowHostExecution: bool = False


class Extras(_Model):
    # The plugin list's key holds dots: it is read by alias, and errors name it as written.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)

    gangAllocation: bool | None = None
    hivedScheduler: Hived | None = None
    runtime_plugins: list[RuntimePlugin] = Field(default_factory=list, alias=RUNTIME_PLUGINS)
    corral: CorralExtras = CorralExtras()


class ExtrasInvalid(ValueError):
    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(message)
        self.loc = loc


def _refuse(loc: Loc, message: str) -> NoReturn:
    raise ExtrasInvalid(loc, message)


@dataclass
class MappedExtras:
    """What ``extras`` adds to the native spec, and what the user should be told."""

    job: dict[str, Any] = field(default_factory=dict)  # native top-level fields
    gpus: dict[str, int] = field(default_factory=dict)  # role → GPUs per instance (HiveD)
    gpu_types: dict[str, str] = field(default_factory=dict)  # role → GPU type (HiveD)
    warnings: list[str] = field(default_factory=list)


def map_extras(extras: Extras, roles: dict[str, int]) -> MappedExtras:
    """The native fields ``extras`` stands for (``roles``: each task role's
    ``resourcePerInstance.gpu``). Raises ``ExtrasInvalid``."""
    mapped = MappedExtras()
    hived = extras.hivedScheduler or Hived()
    mapped.job["priority"] = PRIORITY_CLASSES[hived.jobPriorityClass or "test"]
    _map_hived_roles(hived, roles, mapped)
    at: Loc = ("extras", RUNTIME_PLUGINS)
    seen: set[str] = set()
    for index, plugin in enumerate(extras.runtime_plugins):
        if plugin.plugin in seen:
            _refuse((*at, index, "plugin"), f"plugin {plugin.plugin!r} is given twice; merge its parameters")
        seen.add(plugin.plugin)
        _plugin_scope(plugin, roles, mapped)
        if plugin.plugin == "ssh":
            mapped.job["ssh"] = _ssh(plugin.parameters, roles, (*at, index, "parameters"), mapped)
        elif plugin.plugin == "teamwise_storage":
            mapped.job["storage"] = _storage(plugin.parameters, (*at, index, "parameters"))
        else:
            _refuse(
                (*at, index, "plugin"),
                f"Corral has no runtime plugin {plugin.plugin!r} (it maps ssh and teamwise_storage); "
                "remove it, or do what it does in the task's commands",
            )
    if extras.corral.allowHostExecution:
        mapped.job["allow_host_execution"] = True
    return mapped


def _map_hived_roles(hived: Hived, roles: dict[str, int], mapped: MappedExtras) -> None:
    for role, asks in (hived.taskRoles or {}).items():
        at: Loc = ("extras", "hivedScheduler", "taskRoles", role)
        if role not in roles:
            _refuse(at, "no task role has this name")
        if asks.pinnedCellId is not None:
            _refuse(
                (*at, "pinnedCellId"),
                "Corral has no physical cells to pin a task to; remove pinnedCellId (a virtual cluster "
                "with a quota on the GPU type reserves capacity instead)",
            )
        for new, old in (("skuType", "gpuType"), ("skuNum", "gpuNumber")):
            if getattr(asks, new) is not None and getattr(asks, old) is not None:
                _refuse((*at, old), f"{old} is the older name of {new}; give one of them")
        sku_type = asks.skuType or asks.gpuType
        if sku_type is not None:
            mapped.gpu_types[role] = sku_type
        sku_num = asks.skuNum if asks.skuNum is not None else asks.gpuNumber
        if sku_num is not None:
            mapped.gpus[role] = sku_num
            if sku_num != roles[role]:
                mapped.warnings.append(
                    f"taskRoles.{role}: hivedScheduler skuNum {sku_num} differs from "
                    f"resourcePerInstance.gpu {roles[role]}; {sku_num} GPUs per instance are asked "
                    "for (skuNum wins, as in HiveD)"
                )


def _plugin_scope(plugin: RuntimePlugin, roles: dict[str, int], mapped: MappedExtras) -> None:
    if plugin.taskroles is not None and set(plugin.taskroles) != set(roles):
        mapped.warnings.append(
            f"runtime plugin {plugin.plugin}: Corral applies it to every task role of the job, "
            f"not only {', '.join(map(repr, plugin.taskroles)) or 'none'}"
        )
    if plugin.failurePolicy == "ignore":
        mapped.warnings.append(
            f"runtime plugin {plugin.plugin}: failurePolicy ignore is not kept; a task whose "
            f"{plugin.plugin} cannot be set up fails to start"
        )


_SSH_PARAMETERS = frozenset({"jobssh", "sshbarrier", "sshbarrierTimeout", "sshbarriertaskroles", "userssh"})


def _ssh(parameters: dict[str, Any], roles: dict[str, int], at: Loc, mapped: MappedExtras) -> dict[str, Any]:
    for name in parameters:
        if name not in _SSH_PARAMETERS:
            _refuse((*at, name), f"the ssh plugin has no parameter {name!r} Corral knows")
    jobssh = _flag(parameters, "jobssh", at)
    barrier_value = parameters.get("sshbarrier", False)
    if isinstance(barrier_value, list):  # (an older form: the task roles to wait for)
        barrier_roles: list[Any] | None = barrier_value
        barrier = bool(barrier_value)
    else:
        barrier, barrier_roles = _flag(parameters, "sshbarrier", at), parameters.get("sshbarriertaskroles")
    if barrier and not jobssh:
        _refuse((*at, "sshbarrier"), "sshbarrier waits for the job's ssh between tasks; set jobssh: true")
    if barrier_roles is not None and set(map(str, barrier_roles)) != set(roles):
        mapped.warnings.append(
            "ssh plugin: the barrier waits for every task of the job, not only the task roles named"
        )
    timeout_min = parameters.get("sshbarrierTimeout", SSH_BARRIER_DEFAULT_MIN)
    if isinstance(timeout_min, bool) or not isinstance(timeout_min, int | float) or not timeout_min > 0:
        _refuse((*at, "sshbarrierTimeout"), "give the barrier's timeout in minutes, a number above 0")
    if timeout_min > _MAX_BARRIER_MIN:
        _refuse(
            (*at, "sshbarrierTimeout"), f"Corral's ssh barrier waits at most {_MAX_BARRIER_MIN:.0f} minutes"
        )
    ssh: dict[str, Any] = {
        "between_tasks": jobssh,
        "barrier": barrier,
        "barrier_timeout_s": float(timeout_min) * 60,
    }
    if "userssh" in parameters:
        user = _user_ssh(parameters["userssh"], (*at, "userssh"))
        if user.type == "custom":
            ssh["authorized_keys"] = [user.value]
        else:
            ssh["user_keys"] = [user.value]
    elif not jobssh:
        _refuse(at, "the ssh plugin with neither jobssh nor userssh does nothing; remove it or set one")
    return ssh


def _flag(parameters: dict[str, Any], name: str, at: Loc) -> bool:
    value = parameters.get(name, False)
    if not isinstance(value, bool):
        _refuse((*at, name), "must be true or false")
    return value


def _user_ssh(value: Any, at: Loc) -> UserSsh:
    if isinstance(value, str):  # (an older form: the public key itself)
        return UserSsh(type="custom", value=value)
    if not isinstance(value, dict):
        _refuse(at, "give userssh as {type: custom, value: PUBLIC KEY} or {type: system, value: KEY NAME}")
    kind, text = value.get("type"), value.get("value")
    if kind not in ("custom", "system") or not isinstance(text, str) or set(value) - {"type", "value"}:
        _refuse(at, "give userssh as {type: custom, value: PUBLIC KEY} or {type: system, value: KEY NAME}")
    return UserSsh(type=kind, value=text)


def _storage(parameters: dict[str, Any], at: Loc) -> list[dict[str, Any]]:
    names = parameters.get("storageConfigNames")
    extra = sorted(set(parameters) - {"storageConfigNames"})
    if extra:
        _refuse((*at, extra[0]), "teamwise_storage takes storageConfigNames alone")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        _refuse(
            (*at, "storageConfigNames"),
            "list the storage configs to mount (GET /api/v1/storage lists those you may use)",
        )
    return [{"name": name} for name in names]
