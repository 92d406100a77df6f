"""OpenPAI's runtime plugins, HiveD fields, script/data/output prerequisites and container
options, mapped to the native spec field by field (``services/api/jobs/openpai*.py``);
every one Corral cannot carry out refused with its path and what to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi import Response

from services.api.jobs.body import add_warnings
from services.api.jobs.openpai import ProtocolInvalid, to_native
from shared.jobs import JobSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "openpai"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB6kZl2cJ5v2Bq7D1f0o3rK9Xc5pV2nQeZlF8m4tJg7w alice@laptop"

EVERYTHING = f"""\
protocolVersion: 2
name: Everything
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: 'pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime'}}
  - {{name: code, type: script, uri: 'https://git.example.org/team/bench.git', version: 84820935}}
  - name: cifar
    type: data
    uri: ['https://data.example.org/cifar-10-python.tar.gz', 'file:///datasets/labels.txt']
  - {{name: model, type: output, uri: 'file:///results/model'}}
parameters: {{epochs: 3}}
taskRoles:
  worker:
    instances: 2
    dockerImage: image
    script: code
    data: cifar
    output: model
    extraContainerOptions: {{shmMB: 512}}
    resourcePerInstance: {{cpu: 4, memoryMB: 8192, gpu: 1}}
    commands:
      - cd script_<% $script.name %> && git log -1 --format=%H
      - python train.py --epochs <% $parameters.epochs %> --data ../data_<% $data.name %>
      - echo from <% $data.uri[0] %> at <% $script.uri %>@<% $script.version %>
      - cp -r out <% $output.uri %>
  ps:
    dockerImage: image
    resourcePerInstance: {{cpu: 2, memoryMB: 2048, gpu: 0}}
    commands: [python ps.py]
extras:
  com.microsoft.pai.runtimeplugin:
    - plugin: ssh
      parameters:
        jobssh: true
        sshbarrier: true
        sshbarrierTimeout: 5
        userssh: {{type: custom, value: '{KEY}'}}
    - plugin: teamwise_storage
      parameters: {{storageConfigNames: [team-nfs, scratch]}}
  hivedScheduler:
    jobPriorityClass: prod
    taskRoles:
      worker: {{skuNum: 2, skuType: H100, affinityGroupName: group-a}}
"""


def _changed(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(EVERYTHING)
    for path, value in changes.items():
        target: Any = document
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target[key]
        target[keys[-1]] = value
    return document


def test_every_feature_maps_to_its_native_field() -> None:
    mapped = to_native(yaml.safe_load(EVERYTHING))
    spec = mapped.spec
    worker, ps = spec.tasks
    # HiveD: skuNum wins over resourcePerInstance.gpu, and the submitter is told.
    assert (worker.resources.gpus, worker.resources.gpu_type) == (2, "H100")
    assert any("skuNum 2 differs from resourcePerInstance.gpu 1" in w for w in mapped.warnings)
    assert spec.priority == 100
    assert worker.shm_mb == 512
    assert [(f.uri, f.kind, f.version, f.path) for f in worker.fetch] == [
        ("https://git.example.org/team/bench.git", "git", "84820935", "script_code"),
        (
            "https://data.example.org/cifar-10-python.tar.gz",
            "file",
            None,
            "data_cifar/cifar-10-python.tar.gz",
        ),
        ("file:///datasets/labels.txt", "file", None, "data_cifar/labels.txt"),
    ]
    assert ps.fetch == []  # a role fetches only what it names
    assert worker.command.splitlines() == [
        "cd script_code && git log -1 --format=%H",
        "python train.py --epochs 3 --data ../data_cifar",
        "echo from https://data.example.org/cifar-10-python.tar.gz at "
        "https://git.example.org/team/bench.git@84820935",
        "cp -r out ${CORRAL_OUTPUT_DIR}/model",
    ]
    assert [(o.name, o.path) for o in spec.outputs] == [("model", "model")]
    assert spec.ssh is not None
    assert (spec.ssh.between_tasks, spec.ssh.barrier, spec.ssh.barrier_timeout_s) == (True, True, 300.0)
    assert spec.ssh.authorized_keys == [KEY]
    assert [use.name for use in spec.storage] == ["team-nfs", "scratch"]
    assert spec.allow_host_execution is False


def test_older_and_alternative_forms_map_alike() -> None:
    document = _changed(
        extras={
            "com.microsoft.pai.runtimeplugin": [
                {"plugin": "ssh", "parameters": {"userssh": {"type": "system", "value": "laptop"}}},
            ],
            "hivedScheduler": {"taskRoles": {"worker": {"gpuNumber": 1, "gpuType": "A100"}}},
            "corral": {"allowHostExecution": True},
        }
    )
    mapped = to_native(document)
    assert mapped.spec.ssh is not None
    assert (mapped.spec.ssh.between_tasks, mapped.spec.ssh.user_keys) == (False, ["laptop"])
    assert mapped.spec.tasks[0].resources.gpu_type == "A100"
    assert mapped.spec.allow_host_execution is True
    assert mapped.warnings == []  # gpuNumber 1 is resourcePerInstance.gpu 1


def test_a_plugin_for_some_roles_applies_to_all_and_says_so() -> None:
    document = _changed(
        extras={
            "com.microsoft.pai.runtimeplugin": [
                {
                    "plugin": "teamwise_storage",
                    "parameters": {"storageConfigNames": ["a"]},
                    "taskroles": ["ps"],
                }
            ]
        }
    )
    mapped = to_native(document)
    assert any("every task role" in w and "not only 'ps'" in w for w in mapped.warnings)


PLUGINS = "extras.com.microsoft.pai.runtimeplugin"
REFUSED = [
    pytest.param(
        {"extras__com.microsoft.pai.runtimeplugin__0__plugin": "tensorboard"},
        f"{PLUGINS}.0.plugin",
        "no runtime plugin 'tensorboard'",
        id="unknown-plugin",
    ),
    pytest.param(
        {"extras__com.microsoft.pai.runtimeplugin__0__parameters": {"jobssh": False, "sshbarrier": True}},
        f"{PLUGINS}.0.parameters.sshbarrier",
        "set jobssh: true",
        id="barrier-without-jobssh",
    ),
    pytest.param(
        {"extras__com.microsoft.pai.runtimeplugin__0__parameters": {"jobssh": True, "x11": True}},
        f"{PLUGINS}.0.parameters.x11",
        "no parameter",
        id="unknown-ssh-parameter",
    ),
    pytest.param(
        {
            "extras__com.microsoft.pai.runtimeplugin__0__parameters": {
                "userssh": {"type": "custom", "value": "hi"}
            }
        },
        PLUGINS,
        "not an OpenSSH public key",
        id="bad-public-key",
    ),
    pytest.param(
        {
            "extras__com.microsoft.pai.runtimeplugin__0__parameters": {
                "jobssh": True,
                "sshbarrierTimeout": 600,
            }
        },
        f"{PLUGINS}.0.parameters.sshbarrierTimeout",
        "at most 60 minutes",
        id="barrier-too-long",
    ),
    pytest.param(
        {"extras__com.microsoft.pai.runtimeplugin__1__parameters": {"storageConfigNames": []}},
        f"{PLUGINS}.1.parameters.storageConfigNames",
        "GET /api/v1/storage",
        id="no-storage-names",
    ),
    pytest.param(
        {"extras__com.microsoft.pai.runtimeplugin__1__parameters": {"storageConfigNames": ["Team NFS"]}},
        PLUGINS,
        "pattern",
        id="storage-name-not-a-name",
    ),
    pytest.param(
        {"extras__hivedScheduler__taskRoles__worker__pinnedCellId": "rack-3"},
        "extras.hivedScheduler.taskRoles.worker.pinnedCellId",
        "no physical cells",
        id="pinned-cell",
    ),
    pytest.param(
        {"extras__hivedScheduler__taskRoles__worker__gpuNumber": 2},
        "extras.hivedScheduler.taskRoles.worker.gpuNumber",
        "older name of skuNum",
        id="sku-num-twice",
    ),
    pytest.param(
        {"extras__hivedScheduler__taskRoles__chief": {"skuNum": 1}},
        "extras.hivedScheduler.taskRoles.chief",
        "no task role",
        id="hived-unknown-role",
    ),
    pytest.param(
        {"extras__hivedScheduler__taskRoles__worker__cellType": "DGX"},
        "extras.hivedScheduler.taskRoles.worker.cellType",
        "does not support",
        id="hived-unknown-field",
    ),
    pytest.param(
        {"prerequisites__2__uri": ["hdfs://namenode:9000/cifar"]},
        "prerequisites.2.uri.0",
        "cannot fetch hdfs://",
        id="hdfs-data",
    ),
    pytest.param(
        {"prerequisites__1__uri": "github.com/team/bench"},
        "prerequisites.1.uri",
        "scheme-less",
        id="scheme-less-script",
    ),
    pytest.param(
        {"prerequisites__3__uri": "hdfs://namenode:9000/model"},
        "prerequisites.3.uri",
        "cannot write hdfs://",
        id="hdfs-output",
    ),
    pytest.param(
        {"prerequisites__1__uri": ["https://a/x.git", "https://b/y.git"]},
        "prerequisites.1.uri",
        "only data may list several",
        id="two-scripts-in-one",
    ),
    pytest.param(
        {"prerequisites__1__version": 1.10},
        "prerequisites.1.version",
        "quote it",
        id="float-version",
    ),
    pytest.param(
        {"taskRoles__worker__script": "nope"},
        "taskRoles.worker.script",
        "no prerequisite of type script is named 'nope'",
        id="unknown-script",
    ),
    pytest.param(
        {"taskRoles__worker__data": "code"},
        "taskRoles.worker.data",
        "of type data",
        id="script-named-as-data",
    ),
    pytest.param(
        {"taskRoles__ps__commands": ["echo <% $script.uri %>"]},
        "taskRoles.ps.commands",
        "names no script prerequisite",
        id="script-reference-without-script",
    ),
    pytest.param(
        {"taskRoles__worker__extraContainerOptions": {"shmMB": 9000}},
        "taskRoles.worker.extraContainerOptions.shmMB",
        "more than the task's memory",
        id="shm-over-memory",
    ),
    pytest.param(
        {"taskRoles__worker__extraContainerOptions": {"infiniband": True}},
        "taskRoles.worker.extraContainerOptions.infiniband",
        "InfiniBand",
        id="infiniband",
    ),
    pytest.param(
        {"taskRoles__worker__extraContainerOptions": {"cpuset": "0-3"}},
        "taskRoles.worker.extraContainerOptions.cpuset",
        "does not support",
        id="unknown-container-option",
    ),
    pytest.param(
        {"prerequisites__0__auth": {"username": "u", "passward": "p"}},
        "prerequisites.0.auth",
        "own registry credentials",
        id="registry-auth",
    ),
]


@pytest.mark.parametrize(("changes", "field", "says"), REFUSED)
def test_what_corral_cannot_carry_out_is_refused_with_its_path(
    changes: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(ProtocolInvalid) as refused:
        to_native(_changed(**changes))
    errors = [(".".join(map(str, loc)), message) for loc, message in refused.value.errors]
    assert any(path.startswith(field) and says in message for path, message in errors), errors


def test_a_script_that_is_one_file_is_copied_not_cloned() -> None:
    mapped = to_native(_changed(prerequisites__1__uri="https://example.org/jobs/train.py"))
    [script, *_] = mapped.spec.tasks[0].fetch
    assert (script.kind, script.path, script.version) == ("file", "script_code/train.py", None)


def test_a_warning_header_carries_no_line_break_a_user_wrote() -> None:
    """A plugin's ``taskroles`` are the user's text, and end up in a warning."""
    document = _changed()
    document["extras"]["com.microsoft.pai.runtimeplugin"][1]["taskroles"] = ["ps\r\nX-Evil: 1"]
    [warning] = [w for w in to_native(document).warnings if "not only" in w]
    response = Response()
    add_warnings(response, [warning])
    [value] = response.headers.getlist("warning")
    assert "\r" not in value
    assert "\n" not in value
    assert "x-evil" not in response.headers


def test_two_roles_may_not_fetch_different_sources_to_one_path() -> None:
    """A job's tasks on a node share one working directory."""
    document = _changed()
    document["taskRoles"]["ps"]["script"] = "code"
    to_native(document)  # the same script for both roles: one fetch, shared
    document["prerequisites"].append({"name": "other", "type": "script", "uri": "https://x/y.git"})
    document["prerequisites"][4]["name"] = "code2"
    document["taskRoles"]["ps"]["script"] = "code2"
    to_native(document)  # another script: another path (script_code2)
    spec = to_native(_changed()).spec.model_dump()
    spec["tasks"][1]["fetch"] = [{**spec["tasks"][0]["fetch"][0], "uri": "https://elsewhere/x.git"}]
    with pytest.raises(ValueError, match="two task roles fetch different sources to 'script_code'"):
        JobSpec.model_validate(spec)


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda path: path.name)
def test_the_openpai_examples_map(example: Path) -> None:
    assert to_native(yaml.safe_load(example.read_text())).spec.tasks
