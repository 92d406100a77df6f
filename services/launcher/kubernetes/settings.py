"""Kubernetes driver settings: ``CORRAL_KUBERNETES_*``.

Only what differs between clusters is a setting; everything that follows from a task's
launch (resources, node, command, runtime limit) comes from the ``TaskLaunch``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class KubernetesSettings(BaseSettings):
    """The Kubernetes driver (``CORRAL_LAUNCHER_DRIVER=kubernetes``): where pods go and how
    they run."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_KUBERNETES_", extra="ignore", frozen=True, use_attribute_docstrings=True
    )

    node_pattern: str = Field(default=".*", max_length=200)
    """The nodes the launcher runs through Kubernetes: those the monitor knows whose id (the
    Kubernetes node name) matches this regular expression."""
    namespace: str = Field(default="corral", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    """Where every pod and headless Service of Corral's jobs lives."""
    default_image: str | None = None
    """The image of tasks whose role names none (the local driver runs on the host
    instead)."""
    termination_grace_s: int = Field(default=30, ge=0)
    """The pods' ``terminationGracePeriodSeconds``; a stop passes its own grace on delete."""
    node_binding: Literal["affinity", "node_name"] = "affinity"
    """How a pod is bound to its placed node. ``affinity``: a required node affinity on
    ``metadata.name``, so the kube-scheduler still checks taints and the device plugin's
    GPU count; ``node_name``: bind directly."""
    cluster_domain: str = ""
    """Appended to pod DNS names when set (e.g. ``cluster.local``); ``<pod>.<svc>.<ns>.svc``
    already resolves through every pod's DNS search path."""
    service_account: str | None = None
    """The service account the task pods run as. Unset: the namespace's default."""
    run_as_user: int = Field(default=1000, ge=1)
    """The uid every task's container runs as, never root (an image's own ``USER`` may be
    root: ``runAsNonRoot`` alone would refuse it rather than run it safely)."""
    run_as_group: int = Field(default=1000, ge=1)
    """The gid every task's container runs as."""
    watch_timeout_s: int = Field(default=300, gt=0)
    """A server-side watch timeout: the stream is re-opened from the last
    ``resourceVersion``."""
    retry_delay_s: float = Field(default=1.0, ge=0)
    """Pause before re-opening a watch or re-listing after an API error."""
    log_wait_interval_s: float = Field(default=1.0, gt=0)
    """How often a followed log looks again at a pod whose container has not started."""
    log_streams: int = Field(default=1000, ge=1)
    """Pods' logs are appended to the attempts' log files (pod_logs.py): at most this many
    followed at once, over a connection pool of their own (a pod beyond it waits for a
    stream, and then resumes where its file ends)."""
    log_flush_interval_s: float = Field(default=0.5, gt=0)
    """How often what a log follower holds is written out to its file."""
    log_drain_timeout_s: float = Field(default=30.0, ge=0)
    """When the end of an attempt is recorded, its log has been read to the end, or this
    long has passed since the pod ended."""
    keep_finished_s: float = Field(default=3600.0, ge=0)
    """A finished job's Service (and, through owner references, its pods and their logs) is
    deleted by reconcile once its newest pod has been finished this long."""
