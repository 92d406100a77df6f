"""GPU health rules: what drains a node, what does not, and acting once per event."""

from __future__ import annotations

import pytest

from services.monitor.health import HealthMarks, default_rules, evaluate, lasting_conditions, suspicious
from shared.events.nodes import GpuSample

RULES = default_rules()


def gpus(n: int = 4, **faults: dict[str, object]) -> list[GpuSample]:
    """n healthy GPUs; ``g1={"lost": True}`` breaks GPU 1."""
    return [
        GpuSample.model_validate(
            {
                "index": i,
                "uuid": f"GPU-{i}",
                "model": "m",
                "memory_total_mb": 1,
                "ecc_uncorrected_volatile": 0,
            }
            | faults.get(f"g{i}", {})
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("xid", [48, 64, 74, 79, 95])
def test_hardware_xids_drain(xid: int) -> None:
    findings, _ = evaluate(
        gpus(g1={"last_xid": xid, "xid_count": 1}), "b", HealthMarks("b"), frozenset(), 4, RULES
    )
    assert [(f.gpu_index, f.condition) for f in findings] == [(1, f"xid {xid}")]
    assert findings[0].action in ("drain", "evict")
    assert f"Xid {xid}" in findings[0].detail


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 63, 94, 9999])
def test_application_and_recovered_xids_are_only_recorded(xid: int) -> None:
    findings, _ = evaluate(
        gpus(g0={"last_xid": xid, "xid_count": 1}), "b", HealthMarks("b"), frozenset(), 4, RULES
    )
    assert [f.action for f in findings] == ["ignore"]


def test_an_xid_acts_once_and_a_new_one_acts_again() -> None:
    sample = gpus(g2={"last_xid": 79, "xid_count": 1})
    first, marks = evaluate(sample, "boot-1", HealthMarks(), frozenset(), 4, RULES)
    assert [f.action for f in first] == ["evict"]
    again, marks = evaluate(sample, "boot-1", marks, frozenset(), 4, RULES)
    assert again == []
    later, marks = evaluate(gpus(g2={"last_xid": 48, "xid_count": 2}), "boot-1", marks, frozenset(), 4, RULES)
    assert [(f.condition, f.action) for f in later] == [("xid 48", "drain")]
    # A restarted exporter counts from zero again: its first Xid is new.
    restarted, _ = evaluate(gpus(g2={"last_xid": 74, "xid_count": 1}), "boot-2", marks, frozenset(), 4, RULES)
    assert [f.condition for f in restarted] == ["xid 74"]


def test_uncorrectable_ecc_drains_when_the_count_rises_even_across_exporter_restarts() -> None:
    first, marks = evaluate(
        gpus(g0={"ecc_uncorrected_volatile": 2}), "b1", HealthMarks(), frozenset(), 4, RULES
    )
    assert [(f.condition, f.action) for f in first] == [("uncorrectable_ecc", "drain")]
    same, marks = evaluate(gpus(g0={"ecc_uncorrected_volatile": 2}), "b2", marks, frozenset(), 4, RULES)
    assert same == []  # the driver's counter, not the exporter's: no new error
    more, _ = evaluate(gpus(g0={"ecc_uncorrected_volatile": 3}), "b2", marks, frozenset(), 4, RULES)
    assert [f.condition for f in more] == ["uncorrectable_ecc"]


def test_lasting_conditions_act_until_waived() -> None:
    sample = gpus(g1={"lost": True}, g3={"remap_failure": True})
    findings, _ = evaluate(sample, "b", HealthMarks("b"), frozenset(), 4, RULES)
    assert {(f.gpu_index, f.condition, f.action) for f in findings} == {
        (1, "gpu_lost", "evict"),
        (3, "remap_failure", "drain"),
    }
    waived = frozenset(lasting_conditions(sample))
    assert evaluate(sample, "b", HealthMarks("b"), waived, 4, RULES)[0] == []
    # A different GPU failing later is not covered by the waiver.
    worse = gpus(g0={"lost": True}, g1={"lost": True}, g3={"remap_failure": True})
    assert [f.gpu_index for f in evaluate(worse, "b", HealthMarks("b"), waived, 4, RULES)[0]] == [0]


def test_fewer_gpus_than_expected_evicts() -> None:
    findings, _ = evaluate(gpus(3), "b", HealthMarks("b"), frozenset(), 4, RULES)
    assert [(f.condition, f.action) for f in findings] == [("gpu_missing", "evict")]
    assert "3 of 4 GPUs" in findings[0].detail


def test_the_cheap_fingerprint_is_empty_for_healthy_nodes_only() -> None:
    assert suspicious(gpus(), 4) == ()
    assert suspicious(gpus(g0={"last_xid": 13, "xid_count": 1}), 4) != ()
    assert suspicious(gpus(3), 4) != ()
    assert suspicious(gpus(g2={"lost": True}), 4) != suspicious(gpus(g1={"lost": True}), 4)
