"""An OpenPAI job that uses every feature an OpenPAI team's real jobs use, submitted
unchanged through ``corral submit``, and its effect seen inside the tasks, on a stack of
real processes (sandboxed tasks, as ``make up`` runs them as root):

- the ``ssh`` runtime plugin with a barrier: each worker runs ``ssh worker-N`` to the other;
  ``userssh`` (a public key): ``corral ssh JOB --task worker-0`` with its private key;
- ``teamwise_storage``: each task writes a file on a hostpath storage config, found on the host;
- HiveD's ``skuNum``/``skuType``: the GPUs per instance and their type (``skuNum`` differs
  from ``resourcePerInstance.gpu``: ``corral submit`` prints the API's warning);
- a ``script`` prerequisite from a git repository made here, fetched at its first commit;
  a ``data`` prerequisite; an ``output`` kept as the job's artifact;
- ``extraContainerOptions.shmMB``: the size of ``/dev/shm`` inside the task;
- ``dockerImage``: run through the node's container runtime, here the FAKE runtime of
  tests/fake_container_runtime.py (no runtime runs containers inside this machine's
  sandbox: docs/testing.md), which records its invocation and runs the command.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.launcher.job_keys import new_key_pair
from shared.gpu_types import gpu_type_of
from tests import fake_container_runtime
from tests.e2e.stack import Stack, wait_state
from tests.system_packages import ensure_debian_packages

pytestmark = pytest.mark.timeout(300)
IMAGE = "python:3.12-slim"


@pytest.fixture(autouse=True)
def _needs() -> None:
    ensure_debian_packages(
        {
            Path("/usr/sbin/sshd"): "openssh-server",
            Path("/usr/bin/ssh"): "openssh-client",
            Path("/usr/bin/git"): "git",
        }
    )


@pytest.fixture
def places() -> Iterator[dict[str, Path]]:
    """What the job reads, where a task's uid may read it (git needs a way through every
    parent), and a storage source under a directory of root's alone (docs/storage.md)."""
    public = Path(tempfile.mkdtemp(prefix="corral-openpai-", dir="/var/lib"))
    private = Path(tempfile.mkdtemp(prefix="corral-openpai-storage-", dir="/var/lib"))
    public.chmod(0o755)
    private.chmod(0o700)
    (private / "team").mkdir()
    (private / "team").chmod(0o1777)
    (public / "data").mkdir()
    (public / "data" / "labels.txt").write_text("cat,dog\n")
    yield {"public": public, "team": private / "team"}
    shutil.rmtree(public, ignore_errors=True)
    shutil.rmtree(private, ignore_errors=True)


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@x"
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _repository(root: Path) -> tuple[Path, str]:
    """A repository of two commits; the job asks for the first."""
    repo = root / "bench.git"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "train.py").write_text("print('first')\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "train.py").write_text("print('second')\n")
    _git(repo, "commit", "-q", "-am", "second")
    for path in [repo, *repo.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return repo, first


def _job(repo: Path, commit: str, data: Path, public_key: str, gpu_type: str) -> str:
    # Each line is one of the role's commands, as an OpenPAI user writes them.
    commands = [
        "OTHER=$((1 - PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX))",
        'echo "commit $(git -C script_<% $script.name %> rev-parse HEAD)"',
        "echo \"shm $(df -m /dev/shm | awk 'NR==2 {print $2}')\"",
        'echo "labels $(cat data_<% $data.name %>/labels.txt)"',
        'echo "from worker-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX" >'
        " /mnt/team/from-worker-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX",
        "ssh worker-$OTHER 'echo \"peer $CORRAL_TASK_ROLE-$CORRAL_TASK_INDEX\"'",
        "mkdir -p <% $output.uri %>",
        "echo weights > <% $output.uri %>/weights-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX.txt",
        "until [ -f release ]; do sleep 0.1; done",
    ]
    lines = "\n".join(f"      - {json.dumps(line)}" for line in commands)
    return f"""\
protocolVersion: 2
name: OpenPAI_everything
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: '{IMAGE}'}}
  - {{name: code, type: script, uri: 'file://{repo}', version: '{commit}'}}
  - {{name: labels, type: data, uri: ['file://{data}']}}
  - {{name: model, type: output, uri: 'file:///results/model'}}
taskRoles:
  worker:
    instances: 2
    dockerImage: image
    script: code
    data: labels
    output: model
    extraContainerOptions: {{shmMB: 64}}
    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 2}}
    commands:
{lines}
extras:
  com.microsoft.pai.runtimeplugin:
    - plugin: ssh
      parameters:
        jobssh: true
        sshbarrier: true
        sshbarrierTimeout: 2
        userssh: {{type: custom, value: '{public_key}'}}
    - plugin: teamwise_storage
      parameters: {{storageConfigNames: [team]}}
  hivedScheduler:
    jobPriorityClass: prod
    taskRoles:
      worker: {{skuNum: 1, skuType: '{gpu_type}'}}
"""


def _corral(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CORRAL_URL": stack.base_url, "CORRAL_TOKEN": stack.token()}
    return subprocess.run(  # our own CLI, as a user runs it
        [sys.executable, "-m", "corral", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        stdin=subprocess.DEVNULL,
    )


async def _running(http: httpx.AsyncClient, job_id: str, tasks: int) -> dict[str, Any]:
    for _ in range(900):
        job: dict[str, Any] = (await http.get(f"/api/v1/jobs/{job_id}")).json()
        if sum(a["state"] == "RUNNING" for a in job["attempts"]) == tasks or job["state"] == "FAILED":
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"the tasks of {job_id} never all ran: {job}")


async def _log_says(http: httpx.AsyncClient, job_id: str, task: str, line: str) -> str:
    log = ""
    for _ in range(300):
        log = (await http.get(f"/api/v1/jobs/{job_id}/logs", params={"task": task})).text
        if line in log.splitlines():
            return log
        await asyncio.sleep(0.1)
    raise AssertionError(f"{task}'s log never said {line!r}:\n{log}")


async def test_an_openpai_job_with_every_feature_runs_unchanged(
    runtime_stack: Stack, places: dict[str, Path], tmp_path: Path
) -> None:
    repo, first_commit = _repository(places["public"])
    pair = new_key_pair("alice@laptop")
    key = tmp_path / "laptop"
    key.write_text(pair.private)
    key.chmod(0o600)
    async with runtime_stack.client() as http:
        storage = {"kind": "hostpath", "source": str(places["team"]), "all_users": True}
        assert (await http.put("/api/v1/storage/team", json=storage)).status_code == 201
        [gpu, *_] = (await http.get("/api/v1/gpus")).json()["items"]
        document = tmp_path / "job.yaml"
        labels = places["public"] / "data" / "labels.txt"
        document.write_text(_job(repo, first_commit, labels, pair.public.strip(), gpu_type_of(gpu["model"])))

        submitted = _corral(runtime_stack, "submit", str(document), "--json")
        assert submitted.returncode == 0, submitted.stderr
        assert "warning: taskRoles.worker: hivedScheduler skuNum 1 differs" in submitted.stderr
        job_id = json.loads(submitted.stdout)["id"]
        try:
            job = await _running(http, job_id, 2)
            assert job["state"] == "RUNNING", json.dumps({k: job[k] for k in ("state", "reason", "attempts")})
            spec = job["spec"]
            assert [t["resources"]["gpus"] for t in spec["tasks"]] == [1]  # skuNum wins
            assert spec["priority"] == 100
            for index, other in ((0, 1), (1, 0)):
                task = f"worker-{index}"
                log = await _log_says(http, job_id, task, f"peer worker-{other}")
                said = log.splitlines()
                assert f"commit {first_commit}" in said, log
                assert "shm 64" in said, log
                assert "labels cat,dog" in said, log
            for index in (0, 1):
                written = places["team"] / f"from-worker-{index}"
                assert written.read_text() == f"from worker-{index}\n"
            # userssh: in through the API's gateway with the user's own key.
            ssh_options = ["-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
            inside = _corral(
                runtime_stack,
                "ssh",
                job_id,
                "--task",
                "worker-0",
                "--",
                *ssh_options,
                "cat /mnt/team/from-worker-1",
            )
            assert inside.returncode == 0, inside.stderr
            assert inside.stdout == "from worker-1\n"
        finally:
            runtime_stack.release(job_id)
        ended = await wait_state(http, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout_s=90)
        assert ended["state"] == "SUCCEEDED", ended
        [artifact] = (await http.get(f"/api/v1/jobs/{job_id}/artifacts")).json()["items"]
        assert artifact["output"] == "model"
        manifest = (await http.get(f"/api/v1/artifacts/{artifact['id']}")).json()["manifest"]
        assert {Path(entry["path"]).name for entry in manifest} == {"weights-0.txt", "weights-1.txt"}
    workdirs = {p.parent for p in runtime_stack.home.rglob(fake_container_runtime.CALLS)}
    calls = [call for workdir in workdirs for call in fake_container_runtime.calls(workdir)]
    assert len(calls) == 2, calls
    for call in calls:
        argv = call["argv"]
        assert argv[-4:-1] == [IMAGE, "sh", "-c"]
        assert argv[argv.index("--shm-size") + 1] == "64m"
        assert "/mnt/team:/mnt/team" in argv, argv  # (the sandbox's mount, into the container)
