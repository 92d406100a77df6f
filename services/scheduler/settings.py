"""Scheduler settings: ``CORRAL_SCHEDULER_*`` plus the common groups."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.scheduler.model import LIVE_RESERVE_AFTER_S, LIVE_STARVE_AFTER_S
from shared.settings import CommonSettings


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_SCHEDULER_", extra="ignore")

    # Events wake the cycle at once; this periodic cycle catches whatever they missed.
    cycle_interval_s: float = Field(default=2.0, gt=0)
    leader_retry_s: float = Field(default=1.0, gt=0)
    # A job runs at least this long before a higher-priority job may preempt it (reclaiming
    # a VC's quota from borrowers does not wait: see planner.py).
    min_runtime_s: float = Field(default=300.0, ge=0)
    # Least attained service (planner.py): a job may preempt same-priority jobs of its VC
    # (or borrowed ones) that were served much more. Off: only quota and priority preempt.
    preempt_for_service: bool = True
    # Starvation guard: a job pending this long ranks first and may preempt (2 days: what
    # met the production traces' tail bars, docs/performance.md).
    starve_after_s: float = Field(default=LIVE_STARVE_AFTER_S, gt=0)
    # The first job that cannot fit holds a reservation (EASY backfill) once it waited this
    # long; before, smaller jobs behind it go ahead.
    reserve_after_s: float = Field(default=LIVE_RESERVE_AFTER_S, ge=0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
