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
    model_config = SettingsConfigDict(env_prefix="CORRAL_MONITOR_", extra="ignore")

    # A node whose last heartbeat is older than this is declared UNREACHABLE.
    heartbeat_timeout_s: float = Field(default=15.0, gt=0)
    liveness_interval_s: float = Field(default=2.0, gt=0)
    # Heartbeats are batched (see ingest.py): registrations and health every flush,
    # liveness every touch interval, readings and history every readings interval.
    flush_interval_s: float = Field(default=1.0, gt=0)
    # Liveness (last_heartbeat) is written this often, at most a third of the timeout.
    touch_interval_s: float = Field(default=5.0, gt=0)
    readings_interval_s: float = Field(default=10.0, gt=0)
    history_resolution_s: int = Field(default=10, ge=1)
    history_coarse_s: int = Field(default=300, ge=1)
    history_keep_fine_s: float = Field(default=86_400.0, gt=0)
    history_keep_coarse_s: float = Field(default=30 * 86_400.0, gt=0)


class ExporterSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_EXPORTER_", extra="ignore")

    node_id: str = Field(default_factory=socket.gethostname, pattern=r"^[A-Za-z0-9_-]{1,63}$")
    # Where tasks on this node are reached by their peers (MASTER_ADDR, PAI_HOST_IP_*).
    address: str = Field(default_factory=lambda: _own_address(), max_length=253)
    interval_s: float = Field(default=1.0, gt=0)
    # "auto": NVML on a machine with NVIDIA GPUs (a node whose NVML fails there reports the
    # error and is drained, never simulated), simulated GPUs on a machine with none;
    # "nvml" or "simulated" force one.
    backend: str = Field(default="auto", pattern="^(auto|nvml|simulated)$")
    # Where the machine's /sys is seen, to find its NVIDIA GPUs without NVML ("/" on the
    # node itself; a container may mount the host's elsewhere).
    device_root: Path = Path("/")
    simulated_gpus: int = Field(default=8, ge=0, le=64)
    simulated_model: str = "Simulated H100 80GB"
    # Simulated GPUs in NVLink domains of this many consecutive GPUs (0: one domain, as on
    # an NVSwitch board); real GPUs report theirs through NVML.
    simulated_nvlink_domain_size: int = Field(default=0, ge=0, le=64)
    # The node's topology label (its rack, or the switch it hangs off): the scheduler keeps
    # a multi-node gang within one rack when it fits.
    rack: str = Field(default="", pattern=RACK_PATTERN)
    # What the node offers tasks besides GPUs. Unset: the machine's own for real GPUs (its
    # cores and memory); for simulated GPUs nothing (0: no CPU or memory limit), since the
    # simulated node stands for a GPU server this machine is not.
    cpus: float | None = Field(default=None, ge=0)
    memory_mb: int | None = Field(default=None, ge=0)
    # A YAML file of faults for the simulated GPUs, re-read when it changes (see
    # services/monitor/exporter/simulated.py); `make up` puts it in $CORRAL_HOME.
    faults_file: Path | None = None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    monitor: MonitorSettings = Field(default_factory=MonitorSettings)
    exporter: ExporterSettings = Field(default_factory=ExporterSettings)
