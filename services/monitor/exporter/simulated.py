"""Simulated GPUs for machines without any, scriptable so tests can break them.

The backend is honest about itself: ``simulated`` is True and the model name says
"Simulated", so no chart or table can mistake it for hardware.

Faults come from a small YAML (or JSON) file, re-read whenever its content changes, so
a test or an operator can break a GPU of a running exporter without restarting it::

    visible_gpus: 7            # fewer GPUs than configured: one "fell off"
    gpus:
      3:
        xid: 79                # one Xid event per (re)load of the file
        lost: true             # NVML's GPU_IS_LOST: every reading gone
        ecc_uncorrected_volatile: 2
        remap_failure: true
        throttle_reasons: [HwThermalSlowdown]
        temperature_c: 91
        utilization: busy      # idle (default), busy, sine, or a number
        unsupported: [power_w] # as NVML's NotSupported

A file that does not validate is logged and ignored; the faults in force stay in force.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
import uuid
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.monitor.exporter.topology import simulated_domains
from shared.events.nodes import GpuSample

log = logging.getLogger(__name__)

READINGS = (
    "memory_used_mb",
    "utilization_pct",
    "memory_utilization_pct",
    "temperature_c",
    "power_w",
    "sm_clock_mhz",
    "throttle_reasons",
    "ecc_corrected_volatile",
    "ecc_uncorrected_volatile",
    "remapped_rows_pending",
    "remap_failure",
)


class GpuFault(BaseModel):
    model_config = ConfigDict(extra="forbid")

    xid: int | None = Field(default=None, ge=1, le=1000)
    lost: bool = False
    ecc_corrected_volatile: int | None = Field(default=None, ge=0)
    ecc_uncorrected_volatile: int | None = Field(default=None, ge=0)
    remap_failure: bool | None = None
    remapped_rows_pending: bool | None = None
    throttle_reasons: list[str] | None = None
    temperature_c: float | None = None
    power_w: float | None = Field(default=None, ge=0)
    utilization: Literal["idle", "busy", "sine"] | float = "idle"
    unsupported: list[Literal[READINGS]] = Field(default_factory=list)  # type: ignore[valid-type]


class FaultScript(BaseModel):
    model_config = ConfigDict(extra="forbid")

    visible_gpus: int | None = Field(default=None, ge=0)
    gpus: dict[int, GpuFault] = Field(default_factory=dict)


class SimulatedGpus:
    """N identical GPUs with plausible readings, plus whatever the fault script says."""

    simulated = True
    fault = ""  # (GpuBackend: nothing stops this backend reading its GPUs)

    def __init__(
        self,
        count: int,
        model: str,
        node_id: str,
        memory_total_mb: int = 81_559,
        faults_file: Path | None = None,
        nvlink_domain_size: int = 0,
    ) -> None:
        self._model = model
        self._domains = simulated_domains(count, nvlink_domain_size)
        self._memory_total_mb = memory_total_mb
        # Stable per node and index, so a restarted exporter reports the same inventory.
        self._uuids = [
            f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'corral-sim/{node_id}/{i}')}" for i in range(count)
        ]
        self._faults = FaultScript()
        self._faults_file = faults_file
        self._faults_digest = b""
        self._xids: dict[int, tuple[int, int]] = {}  # index -> (last Xid, count)

    @property
    def gpu_count(self) -> int:
        return len(self._uuids)

    def apply(self, script: FaultScript) -> None:
        """Put a fault script in force; each GPU's ``xid`` counts as one new Xid event."""
        self._faults = script
        for index, fault in script.gpus.items():
            if fault.xid is not None:
                _, count = self._xids.get(index, (0, 0))
                self._xids[index] = (fault.xid, count + 1)

    def _reload_faults(self) -> None:
        if self._faults_file is None:
            return
        try:
            raw = self._faults_file.read_bytes()
        except FileNotFoundError:
            raw = b""
        digest = hashlib.sha256(raw).digest()
        if digest == self._faults_digest:
            return
        self._faults_digest = digest
        try:
            script = FaultScript.model_validate(yaml.safe_load(raw) or {})
        except (yaml.YAMLError, ValidationError) as exc:
            log.error("fault file %s ignored, the faults in force stay: %s", self._faults_file, exc)
            return
        log.warning("simulated GPU faults now in force: %s", script.model_dump(exclude_defaults=True))
        self.apply(script)

    def sample(self) -> list[GpuSample]:
        self._reload_faults()
        visible = self._faults.visible_gpus
        count = len(self._uuids) if visible is None else min(visible, len(self._uuids))
        now = time.time()
        return [self._sample_one(i, now) for i in range(count)]

    def _sample_one(self, index: int, now: float) -> GpuSample:
        fault = self._faults.gpus.get(index, GpuFault())
        last_xid, xid_count = self._xids.get(index, (None, 0))
        identity = {
            "index": index,
            "uuid": self._uuids[index],
            "model": self._model,
            "memory_total_mb": self._memory_total_mb,
            "last_xid": last_xid,
            "xid_count": xid_count,
            "nvlink_domain": self._domains[index],
        }
        if fault.lost:
            return GpuSample(**identity, lost=True)
        utilization = _utilization(fault.utilization, now, index)
        readings: dict[str, object] = {
            "utilization_pct": utilization,
            "memory_utilization_pct": round(utilization * 0.6, 1),
            "memory_used_mb": int(self._memory_total_mb * 0.7) if utilization > 0 else 0,
            "temperature_c": fault.temperature_c
            if fault.temperature_c is not None
            else round(32.0 + utilization * 0.4 + 2.0 * math.sin(now / 60.0 + index), 1),
            "power_w": fault.power_w if fault.power_w is not None else round(70.0 + utilization * 6.3, 1),
            "sm_clock_mhz": 1980 if utilization > 0 else 345,
            "throttle_reasons": fault.throttle_reasons
            if fault.throttle_reasons is not None
            else ([] if utilization > 0 else ["GpuIdle"]),
            "ecc_corrected_volatile": fault.ecc_corrected_volatile or 0,
            "ecc_uncorrected_volatile": fault.ecc_uncorrected_volatile or 0,
            "remapped_rows_pending": bool(fault.remapped_rows_pending),
            "remap_failure": bool(fault.remap_failure),
        }
        for name in fault.unsupported:
            readings[name] = None
        return GpuSample(**identity, **readings, unsupported=list(fault.unsupported))

    def close(self) -> None:
        return None


def _utilization(pattern: str | float, now: float, index: int) -> float:
    if isinstance(pattern, int | float):
        return float(pattern)
    if pattern == "busy":
        return round(95.0 + 4.0 * math.sin(now + index), 1)
    if pattern == "sine":
        return round(50.0 + 49.0 * math.sin(now / 30.0 + index), 1)
    return 0.0
