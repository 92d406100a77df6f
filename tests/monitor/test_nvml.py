"""NVML against a real GPU: runs only where NVML finds one (skipped on CI's machines).

On a machine with GPUs: ``pytest --noconftest tests/monitor/test_nvml.py`` needs only
pydantic and nvidia-ml-py. docs/testing.md records what a run on an H100 showed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pynvml = pytest.importorskip("pynvml")

from services.monitor.exporter.simulated import READINGS  # noqa: E402  # after the skip


def _gpus_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    try:
        return bool(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


pytestmark = pytest.mark.skipif(not _gpus_present(), reason="no NVIDIA GPU on this machine")


def test_every_reading_is_a_value_or_declared_unsupported() -> None:
    from services.monitor.exporter.nvml import NvmlGpus

    gpus = NvmlGpus()
    try:
        samples = gpus.sample()
        assert len(samples) == gpus.gpu_count > 0
        for s in samples:
            print(s.model_dump_json())
            assert s.uuid.startswith("GPU-")
            assert s.memory_total_mb > 0
            assert not s.lost
            for field in READINGS:
                assert (getattr(s, field) is None) == (field in s.unsupported), field
            assert s.memory_used_mb is not None
            assert s.temperature_c is not None
    finally:
        gpus.close()


def test_a_busy_gpu_shows_utilisation_and_its_process() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    from services.monitor.exporter.nvml import NvmlGpus

    load = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import torch, time\n"
            "a = torch.randn(8192, 8192, device='cuda')\n"
            "end = time.time() + 8\n"
            "while time.time() < end: a = (a @ a).clamp_(-1, 1)\n"
            "torch.cuda.synchronize()\n",
        ],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"},
    )
    gpus = NvmlGpus()
    try:
        seen_busy = seen_pid = False
        timings = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and load.poll() is None and not (seen_busy and seen_pid):
            started = time.perf_counter()
            s = gpus.sample()[0]
            timings.append(time.perf_counter() - started)
            print(s.model_dump_json(exclude_defaults=True))
            seen_busy |= (s.utilization_pct or 0) > 50
            seen_pid |= load.pid in s.pids or bool(s.pids)  # containers may show host pids
            time.sleep(0.5)
        timings.sort()
        print(f"sample() of {gpus.gpu_count} GPU(s): median {timings[len(timings) // 2] * 1000:.2f} ms")
        assert seen_busy, "utilisation never rose under a matrix-multiply load"
    finally:
        load.kill()
        load.wait()
        gpus.close()
