"""The spec of MPI and Horovod jobs: the defaults the platform fills in, and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shared.jobs import JobSpec
from shared.mpi_spec import WORKER_COMMAND, MpiSettings, slots_per_worker


def _mpi(framework: str = "mpi", **extra: Any) -> dict[str, Any]:
    return {
        "name": "allreduce",
        "framework": framework,
        "tasks": [
            {"name": "launcher", "command": "mpirun -np 4 python3 allreduce.py"},
            {"name": "worker", "instances": 2, "resources": {"gpus": 2}},
        ],
        **extra,
    }


def _refusal(document: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(document)
    return str(caught.value)


def test_a_worker_runs_the_platforms_sshd_on_a_port_of_its_own_by_default() -> None:
    spec = JobSpec.model_validate(_mpi())
    launcher, worker = spec.tasks
    assert worker.command == WORKER_COMMAND
    assert worker.ports == {"ssh": 1}
    assert launcher.ports == {}  # the launcher runs no sshd
    assert launcher.resources.gpus == 0
    assert slots_per_worker(spec.mpi, worker.resources.gpu_devices) == 2


def test_horovod_gives_the_launcher_a_rendezvous_port_and_keeps_the_users_own_ports() -> None:
    document = _mpi("horovod")
    document["tasks"][1] = {
        **document["tasks"][1],
        "command": "exec $CORRAL_SSHD_COMMAND",
        "ports": {"tb": 1},
    }
    spec = JobSpec.model_validate(document)
    assert spec.tasks[0].ports == {"rendezvous": 1}
    assert spec.tasks[1].ports == {"tb": 1, "ssh": 1}


def test_slots_default_to_one_without_gpus_and_follow_the_setting() -> None:
    assert slots_per_worker(None, 0) == 1
    assert slots_per_worker(MpiSettings(slots_per_worker=6), 2) == 6


def test_the_stored_spec_reads_back_the_same() -> None:
    spec = JobSpec.model_validate(_mpi(mpi={"barrier_timeout_s": 30.0}))
    assert JobSpec.model_validate(spec.model_dump(mode="json")) == spec


def test_an_mpi_job_without_a_worker_role_is_refused_naming_the_field() -> None:
    document = _mpi()
    document["tasks"] = document["tasks"][:1]
    assert "needs a task role named 'worker'" in _refusal(document)
    assert "tasks[].name: worker" in _refusal(document)


def test_an_mpi_job_without_a_launcher_or_with_two_launchers_is_refused() -> None:
    document = _mpi()
    document["tasks"] = document["tasks"][1:]
    assert "named 'launcher' that runs mpirun" in _refusal(document)
    document = _mpi()
    document["tasks"][0] = {**document["tasks"][0], "instances": 2}
    assert "tasks[launcher].instances must be 1" in _refusal(document)


def test_workers_on_another_gpu_type_than_the_launcher_are_refused() -> None:
    document = _mpi()
    document["tasks"][0] = {**document["tasks"][0], "resources": {"gpu_type": "A100"}}
    document["tasks"][1] = {**document["tasks"][1], "resources": {"gpus": 1, "gpu_type": "H100"}}
    assert "resources.gpu_type" in _refusal(document)


def test_a_third_role_is_refused_by_name() -> None:
    document = _mpi()
    document["tasks"].append({"name": "ps", "command": "x"})
    assert "remove tasks[].name: ps" in _refusal(document)


def test_mpi_settings_without_the_framework_and_a_framework_on_a_service_are_refused() -> None:
    assert "mpi settings are for framework" in _refusal(
        {"name": "j", "mpi": {}, "tasks": [{"name": "main", "command": "x"}]}
    )
    service = _mpi(kind="service", service={"replicas": 1, "port": "http"})
    assert "a service runs no framework" in _refusal(service)


def test_a_generic_job_is_untouched() -> None:
    spec = JobSpec.model_validate({"name": "j", "tasks": [{"name": "worker", "command": "x"}]})
    assert spec.framework == "generic"
    assert spec.tasks[0].ports == {}


def test_a_framework_or_role_name_of_the_wrong_type_is_a_validation_error_not_a_crash() -> None:
    assert "framework" in _refusal({**_mpi(), "framework": {}})
    document = _mpi()
    document["tasks"] = [{"name": ["worker"], "command": "x"}, *document["tasks"]]
    assert "name" in _refusal(document)
