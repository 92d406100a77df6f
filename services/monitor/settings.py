"""Monitor and exporter settings: ``CORRAL_MONITOR_*``, ``CORRAL_EXPORTER_*``."""

from __future__ import annotations

import socket
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.events.nodes import RACK_PATTERN
from shared.settings import CommonSettings


def _own_address() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class MonitorSettings(BaseSettings):
    """The monitor: node liveness, and how heartbeats and GPU history are stored."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_MONITOR_", extra="ignore", use_attribute_docstrings=True
    )

    heartbeat_timeout_s: float = Field(default=15.0, gt=0)
    """A node whose last heartbeat is older than this is declared ``UNREACHABLE``."""
    liveness_interval_s: float = Field(default=2.0, gt=0)
    """How often the monitor looks for nodes whose heartbeats stopped."""
    flush_interval_s: float = Field(default=1.0, gt=0)
    """Heartbeats are batched (ingest.py): new nodes' registrations and health changes are
    written this often."""
    touch_interval_s: float = Field(default=5.0, gt=0)
    """How often the liveness (``last_heartbeat``) of the nodes heard is written: at most a
    third of ``heartbeat_timeout_s``."""
    readings_interval_s: float = Field(default=10.0, gt=0)
    """How often each GPU's latest readings and its ended history buckets are written."""
    history_resolution_s: int = Field(default=10, ge=1)
    """The fine GPU history's bucket, in seconds."""
    history_coarse_s: int = Field(default=300, ge=1)
    """The coarse GPU history's bucket, in seconds: fine buckets are rolled up into these."""
    history_keep_fine_s: float = Field(default=86_400.0, gt=0)
    """How long the fine GPU history is kept."""
    history_keep_coarse_s: float = Field(default=30 * 86_400.0, gt=0)
    """How long the coarse GPU history is kept."""
    job_usage_keep_s: float = Field(default=400 * 86_400.0, gt=0)
    """How long each job's daily GPU usage (readings folded per UTC day, for the portal's
    usage page) is kept: a row per job and day, so over a year costs little."""


class ExporterSettings(BaseSettings):
    """The GPU exporter (``services.monitor.exporter``, one per machine): who the node is,
    what it offers, and where its readings come from."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_EXPORTER_", extra="ignore", use_attribute_docstrings=True
    )

    node_id: str = Field(default_factory=socket.gethostname, pattern=r"^[A-Za-z0-9_-]{1,63}$")
    """The node's id, which it registers and heartbeats under."""
    address: str = Field(default_factory=lambda: _own_address(), max_length=253)
    """Where tasks on this node are reached by their peers (``MASTER_ADDR``,
    ``PAI_HOST_IP_*``)."""
    interval_s: float = Field(default=1.0, gt=0)
    """The heartbeat and GPU sampling period."""
    backend: str = Field(default="auto", pattern="^(auto|nvml|simulated)$")
    """Where GPU readings come from. ``auto``: NVML on a machine with NVIDIA GPUs (a node
    whose NVML fails there reports the error and is drained, ``gpu_unreadable``, never
    simulated), simulated GPUs on a machine with none; ``nvml`` or ``simulated`` force
    one."""
    device_root: Path = Path("/")
    """Where the machine's ``/sys`` is seen, to find its NVIDIA GPUs without NVML (``/`` on
    the node itself; a container may mount the host's elsewhere)."""
    simulated_gpus: int = Field(default=8, ge=0, le=64)
    """How many GPUs a simulated node has."""
    simulated_model: str = "Simulated H100 80GB"
    """The model name simulated GPUs report."""
    simulated_nvlink_domain_size: int = Field(default=0, ge=0, le=64)
    """Simulated GPUs are in NVLink domains of this many consecutive GPUs (0: one domain,
    as on an NVSwitch board); real GPUs report theirs through NVML."""
    rack: str = Field(default="", pattern=RACK_PATTERN)
    """The node's topology label (its rack, or the switch it hangs off): the scheduler
    keeps a multi-node gang within one rack when it fits."""
    cpus: float | None = Field(default=None, ge=0)
    """CPUs the node offers tasks besides GPUs: an instance is placed only where its
    ``resources.cpus`` are free. Unset: the machine's own cores for real GPUs; for
    simulated GPUs 0 (no CPU limit), since the simulated node stands for a GPU server this
    machine is not."""
    memory_mb: int | None = Field(default=None, ge=0)
    """Memory the node offers tasks, in MB, as ``cpus`` (unset: the machine's own for real
    GPUs, 0 for simulated ones)."""
    faults_file: Path | None = None
    """A YAML file of faults for the simulated GPUs (Xid, ECC, lost GPUs, throttling),
    re-read when it changes (services/monitor/exporter/simulated.py); ``make up`` puts it in
    ``$CORRAL_HOME``."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    monitor: MonitorSettings = Field(default_factory=MonitorSettings)
    exporter: ExporterSettings = Field(default_factory=ExporterSettings)
