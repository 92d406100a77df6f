"""The simulated GPU backend: plausible readings, and faults scripted through a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.monitor.exporter.backend import open_backend
from services.monitor.exporter.simulated import FaultScript, GpuFault, SimulatedGpus


def test_healthy_simulated_gpus_are_labelled_and_complete() -> None:
    gpus = SimulatedGpus(4, "Simulated H100 80GB", "node-a")
    samples = gpus.sample()
    assert gpus.simulated
    assert [s.index for s in samples] == [0, 1, 2, 3]
    assert all("Simulated" in s.model for s in samples)
    first = samples[0]
    assert first.uuid.startswith("GPU-")
    assert first.memory_total_mb == 81_559
    assert first.utilization_pct == 0.0
    assert first.throttle_reasons == ["GpuIdle"]
    assert first.ecc_uncorrected_volatile == 0
    assert first.remap_failure is False
    assert first.last_xid is None
    assert first.xid_count == 0
    assert not first.lost
    assert first.unsupported == []
    # Same node, same inventory after a restart; another node, other UUIDs.
    assert [s.uuid for s in SimulatedGpus(4, "m", "node-a").sample()] == [s.uuid for s in samples]
    assert SimulatedGpus(1, "m", "node-b").sample()[0].uuid != first.uuid


def test_injected_faults_show_on_their_gpu_only() -> None:
    gpus = SimulatedGpus(4, "Simulated H100 80GB", "node-a")
    gpus.apply(
        FaultScript(
            gpus={
                1: GpuFault(xid=79, lost=True),
                2: GpuFault(ecc_uncorrected_volatile=2, remap_failure=True, utilization="busy"),
                3: GpuFault(
                    throttle_reasons=["HwThermalSlowdown"], temperature_c=91.0, unsupported=["power_w"]
                ),
            }
        )
    )
    s = gpus.sample()
    assert s[0].utilization_pct == 0.0
    assert s[0].temperature_c is not None
    assert s[1].lost
    assert s[1].last_xid == 79
    assert s[1].xid_count == 1
    assert s[1].utilization_pct is None
    assert s[1].temperature_c is None
    assert s[2].ecc_uncorrected_volatile == 2
    assert s[2].remap_failure is True
    assert s[2].utilization_pct is not None
    assert s[2].utilization_pct > 90
    assert s[3].throttle_reasons == ["HwThermalSlowdown"]
    assert s[3].temperature_c == 91.0
    assert s[3].power_w is None
    assert s[3].unsupported == ["power_w"]


def test_the_fault_file_is_reread_when_it_changes(tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    gpus = open_backend("simulated", node_id="n", simulated_gpus=8, simulated_model="Sim", faults_file=faults)
    assert len(gpus.sample()) == 8  # no file yet: healthy

    faults.write_text("visible_gpus: 7\ngpus:\n  0: {xid: 48}\n")
    samples = gpus.sample()
    assert len(samples) == 7
    assert samples[0].last_xid == 48
    assert samples[0].xid_count == 1
    assert gpus.sample()[0].xid_count == 1  # unchanged file: no new event

    faults.write_text("gpus:\n  0: {xid: 48}\n# again\n")
    samples = gpus.sample()
    assert len(samples) == 8
    assert samples[0].xid_count == 2


@pytest.mark.parametrize(
    "text",
    ["gpus: {0: {xid: 'seventy-nine'}}", "gpus: {0: {colour: red}}", "visible_gpus: -1", "{unclosed"],
)
def test_a_bad_fault_file_is_ignored_and_the_faults_in_force_stay(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text("gpus: {2: {lost: true}}")
    gpus = SimulatedGpus(4, "Sim", "n", faults_file=faults)
    assert gpus.sample()[2].lost
    faults.write_text(text)
    assert gpus.sample()[2].lost
    assert "fault file" in caplog.text
    assert "ignored" in caplog.text
