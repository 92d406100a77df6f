"""MIG devices in the node's GPU inventory, read through a fake NVML (``fake_nvml_mig``).

A GPU in MIG mode is reported as its MIG devices, each a GPU of its own type
(``H100-1G.10GB``), with its MIG UUID and memory, at consecutive indices over the node.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.monitor.exporter.backend import open_backend
from services.monitor.exporter.mig import profile_from_attributes
from services.monitor.exporter.nvml import NvmlGpus, mig_enabled
from services.monitor.exporter.simulated import READINGS, SimulatedGpus
from shared.events.nodes import GpuSample
from shared.gpu_types import gpu_type_of, mig_profile_of
from tests.monitor.fake_nvml_mig import H100_MEMORY_MB, FakeGpu, FakeMig, FakeNvml, balanced_h100

OpenNode = Callable[..., NvmlGpus]


@pytest.fixture
def open_node(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenNode]:
    """``open_node(gpu, ...)``: the NVML backend of a node with these fake GPUs."""
    opened: list[NvmlGpus] = []

    def open_(*gpus: FakeGpu) -> NvmlGpus:
        FakeNvml(list(gpus)).install(monkeypatch)
        opened.append(NvmlGpus())
        return opened[-1]

    yield open_
    for backend in opened:
        backend.close()


def _types(samples: list[GpuSample]) -> list[str]:
    return [gpu_type_of(s.model) for s in samples]


def _readings_are_values_or_declared_unsupported(sample: GpuSample) -> None:
    for field in READINGS:
        assert (getattr(sample, field) is None) == (field in sample.unsupported), field


def test_a_split_gpu_is_reported_as_its_mig_devices_each_a_gpu_type(open_node: OpenNode) -> None:
    gpu = balanced_h100()
    gpu.migs[2].pids = [4242]  # type: ignore[union-attr]
    node = open_node(gpu)

    samples = node.sample()

    assert node.gpu_count == len(samples) == 4
    assert [s.index for s in samples] == [0, 1, 2, 3]
    assert _types(samples) == ["H100-1G.10GB", "H100-1G.10GB", "H100-2G.20GB", "H100-3G.40GB"]
    assert samples[0].model == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    assert [s.uuid for s in samples] == [m.uuid for m in gpu.migs if m]
    assert all(s.uuid.startswith("MIG-") for s in samples)
    assert [s.memory_total_mb for s in samples] == [9984, 9984, 20096, 40448]
    assert [s.pids for s in samples] == [[], [], [4242], []]  # each slice's own processes
    assert len({s.nvlink_domain for s in samples}) == 4  # no peer-to-peer between MIG devices
    for s in samples:
        _readings_are_values_or_declared_unsupported(s)
        assert s.memory_used_mb == 64
        assert s.utilization_pct is None  # NVML has no utilization in MIG mode
        assert s.temperature_c == 41  # the chip's, on each of its slices
        assert s.power_w is None  # the chip's, but not counted once per slice
        assert not s.lost


def test_a_mixed_node_numbers_mig_devices_and_whole_gpus_consecutively(open_node: OpenNode) -> None:
    split = FakeGpu(mig_current=True, migs=[FakeMig("3g.40gb"), None, FakeMig("2g.20gb"), FakeMig("2g.20gb")])
    whole = [FakeGpu(), FakeGpu()]
    node = open_node(split, *whole)

    samples = node.sample()

    assert [s.index for s in samples] == [0, 1, 2, 3, 4]  # the empty slot is skipped
    assert _types(samples) == ["H100-3G.40GB", "H100-2G.20GB", "H100-2G.20GB", "H100", "H100"]
    assert [s.uuid for s in samples[3:]] == [g.uuid for g in whole]
    assert samples[3].memory_total_mb == H100_MEMORY_MB
    assert samples[3].utilization_pct == 37.0
    assert samples[3].power_w == 118.0
    assert samples[3].unsupported == []
    domains = [s.nvlink_domain for s in samples]
    assert domains[3] == domains[4]  # the two whole GPUs still share their NVLink domain
    assert len(set(domains[:3])) == 3
    assert domains[3] not in domains[:3]
    assert mig_enabled(node)


def test_an_xid_on_a_split_gpu_shows_on_each_of_its_mig_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([FakeGpu(mig_current=True, migs=[FakeMig("4g.40gb"), FakeMig("3g.40gb")]), FakeGpu()])
    fake.install(monkeypatch)
    node = NvmlGpus()
    try:
        fake.xid(0, 48)
        deadline = time.monotonic() + 5  # the watcher's thread takes the event from the queue
        while not (samples := node.sample())[0].xid_count and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        node.close()

    assert [(s.last_xid, s.xid_count) for s in samples] == [(48, 1), (48, 1), (None, 0)]


def test_a_compute_instance_is_its_own_type(open_node: OpenNode) -> None:
    node = open_node(
        FakeGpu(mig_current=True, migs=[FakeMig("3g.40gb", compute_slices=1), FakeMig("4g.40gb")])
    )

    assert _types(node.sample()) == ["H100-1C.3G.40GB", "H100-4G.40GB"]


def test_a_mig_device_whose_readings_are_not_supported_still_reports(open_node: OpenNode) -> None:
    """A driver that names no profile (the type is worked out from the device's slices and
    memory) and answers NotSupported for the device's memory and processes."""
    unsupported = {"nvmlDeviceGetName", "nvmlDeviceGetComputeRunningProcesses"}
    migs = [FakeMig("1g.10gb", unsupported=unsupported), FakeMig("3g.40gb", 1, unsupported=unsupported)]
    node = open_node(FakeGpu(mig_current=True, migs=[*migs, FakeMig("3g.40gb")]))

    samples = node.sample()

    assert _types(samples) == ["H100-1G.10GB", "H100-1C.3G.40GB", "H100-3G.40GB"]
    assert samples[0].pids == []
    assert "pids" in samples[0].unsupported
    assert "pids" not in samples[2].unsupported
    for s in samples:
        _readings_are_values_or_declared_unsupported(s)
        assert {"utilization_pct", "memory_utilization_pct", "power_w"} <= set(s.unsupported)
        assert s.temperature_c is not None


def test_mig_devices_of_a_lost_gpu_are_lost_and_keep_their_identity(open_node: OpenNode) -> None:
    gpu = balanced_h100()
    node = open_node(gpu, FakeGpu())
    gpu.lost = True

    samples = node.sample()

    assert [s.lost for s in samples] == [True, True, True, True, False]
    assert _types(samples)[:4] == ["H100-1G.10GB", "H100-1G.10GB", "H100-2G.20GB", "H100-3G.40GB"]
    assert samples[0].uuid.startswith("MIG-")


def test_mig_mode_pending_a_reset_reports_the_gpu_as_it_is_now(
    open_node: OpenNode, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    turning_on = FakeGpu(mig_current=False, mig_pending=True)
    turning_off = FakeGpu(mig_current=True, mig_pending=False, migs=[FakeMig("7g.80gb")])

    node = open_node(turning_on, turning_off)
    samples = node.sample()

    assert _types(samples) == ["H100", "H100-7G.80GB"]
    assert samples[0].uuid == turning_on.uuid
    pending = [r.getMessage() for r in caplog.records if "pending a GPU reset" in r.getMessage()]
    assert len(pending) == 2
    assert "GPU 0: MIG mode enabled is pending a GPU reset" in pending[0]
    assert "reported whole" in pending[0]
    assert "GPU 1: MIG mode disabled is pending a GPU reset" in pending[1]
    assert mig_enabled(node)  # GPU 1 is still in MIG mode


def test_a_gpu_in_mig_mode_without_mig_devices_offers_nothing(
    open_node: OpenNode, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    node = open_node(FakeGpu(mig_current=True), FakeGpu())

    assert _types(node.sample()) == ["H100"]
    assert mig_enabled(node)
    assert any("in MIG mode with no MIG devices" in r.getMessage() for r in caplog.records)


def test_mig_enabled_only_where_a_gpu_is_in_mig_mode(open_node: OpenNode) -> None:
    assert not mig_enabled(open_node(FakeGpu(), FakeGpu()))
    assert not mig_enabled(open_node(FakeGpu(name="Tesla V100-SXM2-16GB", mig_capable=False)))
    assert mig_enabled(open_node(FakeGpu(), balanced_h100()))
    simulated = SimulatedGpus(2, "Simulated H100", "n1")
    try:
        assert not mig_enabled(simulated)
    finally:
        simulated.close()


def test_mig_devices_nvml_cannot_list_make_the_node_report_nvmls_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Reported whole, such a GPU would take whole-GPU work CUDA cannot run on it."""
    gpu = FakeGpu(mig_current=True, migs=[FakeMig("7g.80gb")], unsupported={"nvmlDeviceGetMaxMigDeviceCount"})
    FakeNvml([gpu]).install(monkeypatch)

    backend = open_backend("nvml", node_id="n1", simulated_gpus=8, simulated_model="x", device_root=tmp_path)
    try:
        assert backend.sample() == []
        assert "GPU 0 is in MIG mode and NVML cannot list its MIG devices" in backend.fault
        assert not mig_enabled(backend)
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("model", "gpu_type"),
    [
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "H100-1G.10GB"),
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "H100-3G.40GB"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "A100-1G.5GB"),
        ("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "H100-1C.3G.40GB"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "H100-1G.10GB-ME"),
        ("MIG 2g.20gb", "MIG-2G.20GB"),
        # whole GPUs keep their types
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("NVIDIA A10G", "A10G"),
        ("Simulated H100 80GB", "H100"),
    ],
)
def test_gpu_type_of_a_mig_device_is_its_gpus_type_and_profile(model: str, gpu_type: str) -> None:
    assert gpu_type_of(model) == gpu_type
    assert (mig_profile_of(model) is None) == ("MIG" not in model)


@pytest.mark.parametrize(
    ("gpu_slices", "compute_slices", "memory_mb", "gpu_memory_mb", "profile"),
    [
        (1, 1, 9984, H100_MEMORY_MB, "1g.10gb"),
        (1, 1, 20096, H100_MEMORY_MB, "1g.20gb"),
        (2, 2, 20096, H100_MEMORY_MB, "2g.20gb"),
        (3, 3, 40448, H100_MEMORY_MB, "3g.40gb"),
        (3, 1, 40448, H100_MEMORY_MB, "1c.3g.40gb"),
        (7, 7, 80896, H100_MEMORY_MB, "7g.80gb"),
        (1, 1, 4864, 40960, "1g.5gb"),  # A100 40GB
        (3, 3, 20096, 40960, "3g.20gb"),
        (7, 7, 40192, 40960, "7g.40gb"),
    ],
)
def test_a_mig_profile_from_slices_and_memory(
    gpu_slices: int, compute_slices: int, memory_mb: int, gpu_memory_mb: int, profile: str
) -> None:
    assert (
        profile_from_attributes(gpu_slices, compute_slices, memory_mb, gpu_memory_mb * 1024 * 1024) == profile
    )
