"""GPU health rules (data: ``health_rules.yaml``) and their evaluation.

``evaluate`` is pure: given a node's heartbeat and what the rules already acted on
(``HealthMarks``), it returns the new findings and the marks to store. Two kinds of
trouble are told apart:

- **events** (an Xid, a rise of the uncorrectable-ECC count) act once: the marks hold
  the counts already seen. Xid counts start at zero with each exporter (its ``boot_id``);
  ECC counts belong to the driver and survive an exporter restart.
- **lasting conditions** (a lost GPU, a failed row remap, fewer GPUs than expected) act
  while they last, unless an admin accepted them by undraining (``waivers``).
- **a node whose GPUs cannot be read** (NVML fails where the kernel shows NVIDIA GPUs:
  the exporter's ``gpu_fault``) acts once per exporter start and each time the fault
  comes back, like an event: an admin who undrains it (to run CPU work there, say) is
  not overruled until the exporter restarts or the fault clears and returns.

Only the last Xid of a GPU is visible per heartbeat; two Xids within one second count
as the later one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict

from shared.events.nodes import GpuSample

RULES_PATH = Path(__file__).parent / "health_rules.yaml"
Action = Literal["drain", "evict", "ignore"]
Condition = Literal["gpu_lost", "gpu_missing", "uncorrectable_ecc", "remap_failure", "gpu_unreadable"]


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Action
    meaning: str


class HealthRules(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    xid: dict[int, Rule]
    conditions: dict[Condition, Rule]

    def for_xid(self, xid: int) -> Rule:
        return self.xid.get(xid, Rule(action="ignore", meaning="an Xid the rules do not list"))


@cache
def default_rules(path: Path = RULES_PATH) -> HealthRules:
    return HealthRules.model_validate(yaml.safe_load(path.read_text()))


@dataclass(frozen=True)
class Finding:
    gpu_index: int | None
    condition: str  # "xid 79", "gpu_lost", ...
    action: Action
    detail: str

    @property
    def waiver(self) -> str:
        return f"{self.gpu_index}:{self.condition}"


@dataclass
class HealthMarks:
    boot_id: str = ""
    xid_counts: dict[int, int] = field(default_factory=dict)
    ecc_counts: dict[int, int] = field(default_factory=dict)
    gpu_fault_seen: bool = False

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> HealthMarks:
        def counts(key: str) -> dict[int, int]:
            raw = doc.get(key) or {}
            return {int(k): int(v) for k, v in raw.items()} if isinstance(raw, dict) else {}

        return cls(
            boot_id=str(doc.get("boot_id", "")),
            xid_counts=counts("xid"),
            ecc_counts=counts("ecc"),
            gpu_fault_seen=bool(doc.get("gpu_fault")),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "boot_id": self.boot_id,
            "xid": {str(k): v for k, v in self.xid_counts.items()},
            "ecc": {str(k): v for k, v in self.ecc_counts.items()},
            "gpu_fault": self.gpu_fault_seen,
        }


LASTING = ("gpu_lost", "remap_failure", "gpu_missing")


def evaluate(
    gpus: list[GpuSample],
    boot_id: str,
    marks: HealthMarks,
    waivers: frozenset[str],
    expected_gpus: int,
    rules: HealthRules,
    gpu_fault: str = "",
) -> tuple[list[Finding], HealthMarks]:
    findings: list[Finding] = []
    new_boot = boot_id != marks.boot_id
    if gpu_fault and (new_boot or not marks.gpu_fault_seen):
        rule = rules.conditions["gpu_unreadable"]
        findings.append(Finding(None, "gpu_unreadable", rule.action, f"{gpu_fault} ({rule.meaning})"))
    seen_xids = {} if new_boot else dict(marks.xid_counts)
    seen_ecc = dict(marks.ecc_counts)
    for gpu in gpus:
        if gpu.xid_count > seen_xids.get(gpu.index, 0) and gpu.last_xid is not None:
            rule = rules.for_xid(gpu.last_xid)
            findings.append(
                Finding(
                    gpu.index,
                    f"xid {gpu.last_xid}",
                    rule.action,
                    f"GPU {gpu.index}: Xid {gpu.last_xid} ({rule.meaning})",
                )
            )
        seen_xids[gpu.index] = gpu.xid_count
        ecc = gpu.ecc_uncorrected_volatile
        if ecc is not None:
            if ecc > seen_ecc.get(gpu.index, 0):
                rule = rules.conditions["uncorrectable_ecc"]
                findings.append(
                    Finding(
                        gpu.index,
                        "uncorrectable_ecc",
                        rule.action,
                        f"GPU {gpu.index}: {ecc} uncorrectable ECC error(s) ({rule.meaning})",
                    )
                )
            seen_ecc[gpu.index] = ecc  # lower after a driver reload: start again from there
        lasting: list[Condition] = []
        if gpu.lost:
            lasting.append("gpu_lost")
        if gpu.remap_failure:
            lasting.append("remap_failure")
        for condition in lasting:
            rule = rules.conditions[condition]
            findings.append(Finding(gpu.index, condition, rule.action, f"GPU {gpu.index}: {rule.meaning}"))
    if len(gpus) < expected_gpus:
        rule = rules.conditions["gpu_missing"]
        findings.append(
            Finding(
                None,
                "gpu_missing",
                rule.action,
                f"{len(gpus)} of {expected_gpus} GPUs visible ({rule.meaning})",
            )
        )
    findings = [f for f in findings if f.condition not in LASTING or f.waiver not in waivers]
    marks_now = HealthMarks(boot_id, seen_xids, seen_ecc, gpu_fault_seen=bool(gpu_fault))
    return findings, marks_now


def lasting_conditions(gpus: list[GpuSample]) -> list[str]:
    """The waivers an undrain grants: the lasting conditions present right now."""
    waivers = [f"{g.index}:gpu_lost" for g in gpus if g.lost]
    waivers += [f"{g.index}:remap_failure" for g in gpus if g.remap_failure]
    return waivers  # (a missing GPU needs none: undraining lowers expected_gpus instead)


def suspicious(gpus: list[GpuSample], expected_gpus: int, gpu_fault: str = "") -> tuple[object, ...]:
    """A cheap fingerprint of everything the rules look at; empty for a healthy node.

    The ingest path runs the full (transactional) evaluation only when this changes.
    """
    if gpu_fault:
        return (("unreadable", gpu_fault),)
    marks = tuple(
        (g.index, g.xid_count, g.last_xid, g.ecc_uncorrected_volatile, g.lost, g.remap_failure)
        for g in gpus
        if g.xid_count or g.ecc_uncorrected_volatile or g.lost or g.remap_failure
    )
    short = len(gpus) < expected_gpus
    return (*marks, ("short", len(gpus))) if short else marks
