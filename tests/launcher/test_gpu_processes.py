"""The agent's readers of a shared GPU's processes: NVML (against a fake of pynvml's
functions) and the scripted file that stands in for it on simulated GPUs.

``FakeNvml`` is an honest, labelled fake of what cannot exist on a machine without
NVIDIA GPUs: the answers of the NVML library behind the pynvml functions the reader
calls, in pynvml's own types (``c_nvmlMemory_t``, ``c_nvmlProcessInfo_v2_t`` made
friendly objects, ``usedGpuMemory`` None where the driver cannot tell, as pynvml turns
``NVML_VALUE_NOT_AVAILABLE``) and raising pynvml's own errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
import pytest

from services.launcher.agent.app import gpu_shares
from services.launcher.agent.gpu_share.processes import (
    SIMULATED_MEMORY_MB,
    NvmlProcesses,
    ScriptedProcesses,
    open_reader,
)

MIB = 1024 * 1024


@dataclass
class FakeGpu:
    memory_mb: int = 81559
    compute: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes or None)
    mps: list[tuple[int, int | None]] | None = None  # None: the driver has no MPS (NotSupported)


@dataclass
class FakeNvml:
    gpus: list[FakeGpu]
    initialised: int = 0
    shut_down: int = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
        for name in (
            "nvmlInit",
            "nvmlShutdown",
            "nvmlDeviceGetHandleByIndex",
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetMPSComputeRunningProcesses",
        ):
            monkeypatch.setattr(pynvml, name, getattr(self, name))
        return self

    def nvmlInit(self) -> None:
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.shut_down += 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> pynvml.c_nvmlMemory_t:
        total = gpu.memory_mb * MIB
        return pynvml.c_nvmlMemory_t(total, total, 0)

    @staticmethod
    def _listed(processes: list[tuple[int, int | None]]) -> list[Any]:
        found = []
        for pid, used in processes:
            raw = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else used
            obj = pynvml.nvmlStructToFriendlyObject(pynvml.c_nvmlProcessInfo_v2_t(pid, raw, 0, 0))
            if obj.usedGpuMemory == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                obj.usedGpuMemory = None  # (as pynvml does)
            found.append(obj)
        return found

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[Any]:
        return self._listed(gpu.compute)

    def nvmlDeviceGetMPSComputeRunningProcesses(self, gpu: FakeGpu) -> list[Any]:
        if gpu.mps is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._listed(gpu.mps)


def test_nvml_gives_each_process_and_its_memory_in_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(
        [
            FakeGpu(compute=[(4242, 30000 * MIB), (77, None)]),  # 77: the driver cannot tell
            FakeGpu(memory_mb=40960, compute=[(5151, 1024 * MIB + 5)]),
        ]
    ).install(monkeypatch)
    reader = NvmlProcesses()
    assert fake.initialised == 1
    assert reader.processes(0) == [(4242, 30000), (77, 0)]
    assert reader.processes(1) == [(5151, 1024)]
    assert (reader.memory_total_mb(0), reader.memory_total_mb(1)) == (81559, 40960)
    reader.close()
    assert fake.shut_down == 1


def test_under_mps_the_clients_are_read_with_their_own_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    # The compute list holds the MPS server; each client is in the MPS list.
    server, alice, bob = 900, 4242, 5151
    gpu = FakeGpu(compute=[(server, 300 * MIB)], mps=[(alice, 20000 * MIB), (bob, 9000 * MIB)])
    FakeNvml([gpu]).install(monkeypatch)
    assert sorted(NvmlProcesses().processes(0)) == [(server, 300), (alice, 20000), (bob, 9000)]


def test_a_process_listed_twice_counts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(compute=[(4242, 30000 * MIB)], mps=[(4242, 30000 * MIB)])
    FakeNvml([gpu]).install(monkeypatch)
    assert NvmlProcesses().processes(0) == [(4242, 30000)]


def test_a_driver_error_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNvml([FakeGpu()]).install(monkeypatch)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        NvmlProcesses().processes(3)


def test_the_scripted_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "gpu-processes.json"
    reader = ScriptedProcesses(path)
    assert reader.processes(0) == []  # no file yet: no processes
    assert reader.memory_total_mb(0) == SIMULATED_MEMORY_MB
    path.write_text(json.dumps({"memory_total_mb": 40960, "gpus": {"0": [{"pid": 12, "used_mb": 500}]}}))
    assert reader.processes(0) == [(12, 500)]
    assert reader.processes(1) == []
    assert reader.memory_total_mb(0) == 40960
    path.write_text(json.dumps({"gpus": {"1": [{"pid": 13, "used_mb": 700}, {"pid": 14, "used_mb": 1}]}}))
    assert reader.processes(0) == []
    assert reader.processes(1) == [(13, 700), (14, 1)]


def test_a_scripted_file_that_is_no_such_file_reads_no_processes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "gpu-processes.json"
    path.write_text('{"gpus": {"0": [{"pid": "x"}]}}')
    assert ScriptedProcesses(path).processes(0) == []
    assert "is not a GPU processes file" in caplog.text


def test_the_reader_is_nvml_where_there_is_one_else_the_file_else_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    scripted = open_reader(tmp_path / "gpu-processes.json")
    assert isinstance(scripted, ScriptedProcesses)
    assert scripted.path == tmp_path / "gpu-processes.json"
    assert open_reader(None) is None
    FakeNvml([FakeGpu()]).install(monkeypatch)
    assert isinstance(open_reader(tmp_path / "gpu-processes.json"), NvmlProcesses)


def test_an_agent_reads_gpu_processes_only_where_its_node_places_fractions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    monkeypatch.setenv("CORRAL_GPU_SHARING_PROCESSES_FILE", str(tmp_path / "gpu-processes.json"))
    for mode in ("none", "mig"):
        monkeypatch.setenv("CORRAL_GPU_SHARING", mode)
        assert gpu_shares().reader is None  # no task holds a share there: nothing to check
    monkeypatch.setenv("CORRAL_GPU_SHARING", "timeslice")
    shares = gpu_shares()
    assert isinstance(shares.reader, ScriptedProcesses)
    assert shares.settings.mode == "timeslice"
