"""Launcher and node-agent settings: ``CORRAL_LAUNCHER_*``, ``CORRAL_AGENT_*``."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.launcher.kubernetes.settings import KubernetesSettings
from shared.settings import CommonSettings


class LauncherSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_LAUNCHER_", extra="ignore")

    reconcile_interval_s: float = Field(default=5.0, gt=0)
    # "local": node agents run tasks as processes (one agent per machine, make up);
    # "kubernetes": the launcher runs them as Pods (services/launcher/kubernetes/runner.py,
    # CORRAL_KUBERNETES_* settings; in-cluster credentials, else KUBECONFIG).
    driver: Literal["local", "kubernetes"] = "local"


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_AGENT_", extra="ignore")

    node_id: str = Field(default_factory=socket.gethostname, pattern=r"^[A-Za-z0-9_-]{1,63}$")
    # Per-attempt logs and the pid/exit files that let a restarted agent re-adopt tasks.
    # Default: $CORRAL_HOME/logs and $CORRAL_HOME/agent/<node>.
    log_dir: Path | None = None
    state_dir: Path | None = None
    reconcile_interval_s: float = Field(default=2.0, gt=0)
    stop_grace_s: float = Field(default=10.0, ge=0)
    # The agent renews its lease every third of this; a node whose agent has been silent
    # this long is declared lost and its tasks are retried elsewhere.
    lease_s: float = Field(default=15.0, gt=0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    launcher: LauncherSettings = Field(default_factory=LauncherSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    kubernetes: KubernetesSettings = Field(default_factory=KubernetesSettings)

    @property
    def log_dir(self) -> Path:
        return (self.agent.log_dir or self.common.paths.home / "logs").resolve()

    @property
    def work_dir(self) -> Path:
        """Each job's working directory lives under here (shared by its tasks on a node)."""
        return (self.common.paths.home / "work").resolve()

    @property
    def state_dir(self) -> Path:
        return (self.agent.state_dir or self.common.paths.home / "agent" / self.agent.node_id).resolve()
