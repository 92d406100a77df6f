"""What each GPU sharing mode puts in a sharing task's environment, and when a node
refuses a mode: the tool it relies on is missing, or its GPUs cannot do it."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.gpu_sharing import GpuSharingSettings, mode_refusal, share_environment, share_memory_mb

SETTINGS = GpuSharingSettings(hami_library=Path("/opt/hami/libvgpu.so"), mps_pipe_dir=Path("/run/mps-pipes"))
SHARE = {"CORRAL_GPU_SHARE": "0.5", "CORRAL_GPU_MEMORY_MB": "40779"}


def test_timeslice_tells_the_task_its_share_and_enforces_nothing() -> None:
    env = share_environment("timeslice", SETTINGS, milli=500, memory_mb=40779)
    assert env == {"CORRAL_GPU_SHARING": "timeslice", **SHARE}


def test_mps_caps_the_clients_threads_and_its_one_devices_memory() -> None:
    env = share_environment("mps", SETTINGS, milli=500, memory_mb=40779)
    assert env == {
        "CORRAL_GPU_SHARING": "mps",
        **SHARE,
        "CUDA_MPS_PIPE_DIRECTORY": "/run/mps-pipes",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40779M",  # device 0: the task sees one GPU
    }


def test_hami_preloads_its_library_with_the_memory_and_compute_caps() -> None:
    env = share_environment("hami", SETTINGS, milli=250, memory_mb=12000)
    assert env == {
        "CORRAL_GPU_SHARING": "hami",
        "CORRAL_GPU_SHARE": "0.25",
        "CORRAL_GPU_MEMORY_MB": "12000",
        "LD_PRELOAD": "/opt/hami/libvgpu.so",
        "CUDA_DEVICE_MEMORY_LIMIT": "12000m",
        "CUDA_DEVICE_SM_LIMIT": "25",
    }


def test_a_tiny_share_still_gets_one_percent_of_the_compute() -> None:
    env = share_environment("mps", SETTINGS, milli=1, memory_mb=81)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "1"
    assert env["CORRAL_GPU_SHARE"] == "0.001"


def test_a_shares_memory_is_what_it_asked_else_its_fraction_of_the_gpus() -> None:
    assert share_memory_mb(500, None, 81559) == 40779
    assert share_memory_mb(500, 20000, 81559) == 20000


def _refusal(mode: str, *, simulated: bool = False, mig: bool = False, **kwargs: object) -> str:
    return mode_refusal(mode, SETTINGS, simulated=simulated, mig_enabled=mig, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["none", "timeslice"])
def test_modes_that_need_no_tool_are_never_refused(mode: str) -> None:
    assert _refusal(mode) == ""
    assert _refusal(mode, simulated=True) == ""


def test_mps_is_refused_without_its_control_binary_and_on_simulated_gpus() -> None:
    missing = _refusal("mps", which=lambda _name: None)
    assert "nvidia-cuda-mps-control is not on this node's PATH" in missing
    assert "CORRAL_GPU_SHARING=timeslice" in missing  # what to do instead
    assert _refusal("mps", which=lambda name: f"/usr/bin/{name}") == ""
    assert "simulated GPUs have no MPS daemon" in _refusal(
        "mps", simulated=True, which=lambda name: f"/usr/bin/{name}"
    )


def test_hami_is_refused_without_its_library(tmp_path: Path) -> None:
    refusal = _refusal("hami")  # /opt/hami/libvgpu.so is not there
    assert "HAMi-core's library is not at /opt/hami/libvgpu.so" in refusal
    assert "CORRAL_GPU_SHARING_HAMI_LIBRARY" in refusal
    library = tmp_path / "libvgpu.so"
    library.write_bytes(b"\x7fELF")
    present = GpuSharingSettings(hami_library=library)
    assert mode_refusal("hami", present, simulated=False, mig_enabled=False) == ""


def test_mig_is_refused_without_mig_devices_or_with_mixed_profiles() -> None:
    assert "no GPU of this node is in MIG mode" in _refusal("mig")
    assert "simulated GPUs have no MIG devices" in _refusal("mig", simulated=True)
    assert _refusal("mig", mig=True, gpu_types=["H100-1G.10GB", "H100-1G.10GB"]) == ""
    mixed = _refusal("mig", mig=True, gpu_types=["H100-1G.10GB", "H100-3G.40GB"])
    assert "several profiles (H100-1G.10GB, H100-3G.40GB)" in mixed


@pytest.mark.parametrize("mode", ["none", "timeslice", "mps", "hami"])
def test_gpus_in_mig_mode_are_offered_only_by_a_mig_pool(mode: str) -> None:
    refusal = _refusal(mode, mig=True, which=lambda name: f"/usr/bin/{name}")
    assert f"GPU sharing mode {mode}: GPUs of this node are in MIG mode" in refusal
    assert "set CORRAL_GPU_SHARING=mig, or turn MIG off" in refusal


def test_mig_on_unreadable_gpus_says_they_cannot_be_read() -> None:
    refusal = _refusal("mig", fault="NVML: driver not loaded")
    assert "this node's GPUs cannot be read (NVML: driver not loaded)" in refusal


def test_an_agent_on_a_mig_pool_refuses_to_start_a_task_on_a_mig_device() -> None:
    from services.launcher.agent.gpu_share.shares import GpuShares

    mig = GpuShares(GpuSharingSettings(CORRAL_GPU_SHARING="mig"), None)
    assert "cannot yet give a task one" in mig.start_problem([0])
    assert mig.start_problem([]) == ""  # a GPU-less task runs
    assert GpuShares(GpuSharingSettings(CORRAL_GPU_SHARING="timeslice"), None).start_problem([0]) == ""


def test_the_mode_is_read_from_corral_gpu_sharing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_GPU_SHARING", "hami")
    monkeypatch.setenv("CORRAL_GPU_SHARING_OVER_LIMIT", "warn")
    settings = GpuSharingSettings()
    assert (settings.mode, settings.over_limit) == ("hami", "warn")
