"""Which GPU backend a node gets: never simulated GPUs on a machine that has NVIDIA GPUs.

NVML is made to fail by a library built in the test (``nvml_failing``), loaded in a
child process, since pynvml keeps the first library it loads for the process's life.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from services.monitor.exporter.backend import UnreadableGpus, nvidia_devices, open_backend
from services.monitor.exporter.simulated import SimulatedGpus
from services.monitor.health import HealthMarks, default_rules, evaluate, suspicious
from tests.monitor.nvml_failing import failing_nvml, fake_sysfs

_OPEN = """
import json, sys
from pathlib import Path
from services.monitor.exporter.backend import open_backend
backend = open_backend(sys.argv[1], node_id="n1", simulated_gpus=8, simulated_model="Simulated H100 80GB",
                       device_root=Path(sys.argv[2]))
print(json.dumps({"kind": type(backend).__name__, "simulated": backend.simulated,
                  "fault": backend.fault, "gpus": len(backend.sample())}))
"""


def _open_in_child(kind: str, device_root: Path, nvml_dir: Path) -> dict[str, object]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(nvml_dir)}
    done = subprocess.run(
        [sys.executable, "-c", _OPEN, kind, str(device_root)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    result["log"] = done.stderr
    return result


def test_only_nvidia_display_controllers_count_as_gpus(tmp_path: Path) -> None:
    root = fake_sysfs(tmp_path, gpus=4)
    assert nvidia_devices(root) == [f"0000:{0x18 + i:02x}:00.0" for i in range(4)]
    assert nvidia_devices(tmp_path / "nothing") == []


@pytest.mark.parametrize("kind", ["auto", "nvml"])
def test_nvidia_gpus_whose_nvml_fails_report_the_error_and_no_gpus(tmp_path: Path, kind: str) -> None:
    opened = _open_in_child(kind, fake_sysfs(tmp_path / "root"), failing_nvml(tmp_path / "lib"))
    assert opened["kind"] == "UnreadableGpus"
    assert opened["simulated"] is False
    assert opened["gpus"] == 0
    assert opened["fault"] == "NVML fails on a machine with 8 NVIDIA GPU(s): Driver Not Loaded"
    assert "Driver Not Loaded" in str(opened["log"])  # said loudly, not at INFO


def test_a_machine_with_no_nvidia_gpu_gets_simulated_ones_in_auto(tmp_path: Path) -> None:
    opened = _open_in_child("auto", tmp_path / "empty-root", failing_nvml(tmp_path / "lib"))
    assert opened["kind"] == "SimulatedGpus"
    assert opened["simulated"] is True
    assert opened["gpus"] == 8
    assert opened["fault"] == ""


def test_without_any_nvml_library_the_same_holds(tmp_path: Path) -> None:
    if nvidia_devices():
        pytest.skip("this machine has NVIDIA GPUs: its real NVML answers")
    gpu_server, laptop = fake_sysfs(tmp_path / "gpu-server"), tmp_path / "laptop"
    settings: dict[str, Any] = {"node_id": "n1", "simulated_gpus": 2, "simulated_model": "x"}
    backend = open_backend("auto", **settings, device_root=gpu_server)
    assert isinstance(backend, UnreadableGpus)
    assert "NVML Shared Library Not Found" in backend.fault
    simulated = open_backend("auto", **settings, device_root=laptop)
    assert isinstance(simulated, SimulatedGpus)


def test_an_unreadable_node_is_drained_with_nvmls_error_once_per_exporter_start() -> None:
    fault = "NVML fails on a machine with 8 NVIDIA GPU(s): Driver Not Loaded"
    rules = default_rules()
    assert suspicious([], 0, fault) != suspicious([], 0)  # the ingest path evaluates it
    findings, marks = evaluate([], "boot-1", HealthMarks(), frozenset(), 0, rules, fault)
    (finding,) = findings
    assert finding.condition == "gpu_unreadable"
    assert finding.action == "drain"
    assert finding.detail.startswith(fault)
    assert evaluate([], "boot-1", HealthMarks(), frozenset(), 0, rules)[0] == []
    # Acted on: an admin's undrain stands (a restarted monitor reads the stored marks)...
    stored = HealthMarks.from_json(marks.to_json())
    assert evaluate([], "boot-1", stored, frozenset(), 0, rules, fault)[0] == []
    # ...until the exporter restarts with the fault, or the fault clears and returns.
    assert evaluate([], "boot-2", stored, frozenset(), 0, rules, fault)[0] == findings
    _, cleared = evaluate([], "boot-1", stored, frozenset(), 0, rules)
    assert evaluate([], "boot-1", cleared, frozenset(), 0, rules, fault)[0] == findings
