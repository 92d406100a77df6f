"""Scheduler settings: ``CORRAL_SCHEDULER_*`` plus the common groups."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.scheduler.model import LIVE_RESERVE_AFTER_S, PlanSettings
from services.scheduler.starvation import StarvationRule
from shared.settings import CommonSettings


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_SCHEDULER_", extra="ignore")

    # Events wake the cycle at once; this periodic cycle catches whatever they missed.
    cycle_interval_s: float = Field(default=2.0, gt=0)
    # ...but a cycle starts at least this long after the last one ended (Slurm's
    # sched_min_interval): under a stream of events, those of these milliseconds share a
    # cycle instead of a cycle each (cycle.py).
    min_cycle_gap_s: float = Field(default=0.02, ge=0, le=10)
    leader_retry_s: float = Field(default=1.0, gt=0)
    # A job runs at least this long before a higher-priority job may preempt it (reclaiming
    # a VC's quota from borrowers does not wait: see planner.py).
    min_runtime_s: float = Field(default=300.0, ge=0)
    # Least attained service (planner.py): a job may preempt same-priority jobs of its VC
    # (or borrowed ones) that were served much more. Off: only quota and priority preempt.
    preempt_for_service: bool = True
    # Moves (moves.py): small borrowed jobs are moved off a node so that a job that the
    # free GPUs could hold, but no one node's, fits there. Off: such a job waits (Fragmented).
    move_to_defragment: bool = True
    # Starvation guard (starvation.py): a job pending longer than ``starve_factor`` times the
    # typical wait (finished jobs' queueing delay, a moving average with time constant
    # ``starve_window_s``) — and at least ``starve_min_wait_s`` — ranks first and may
    # preempt. With these defaults (and moves) the live policy meets the tail bar (p99.9
    # wait no worse than FIFO with EASY backfill) on all four trace slices
    # (docs/performance.md).
    starve_min_wait_s: float = Field(default=StarvationRule.min_wait_s, gt=0)
    starve_factor: float = Field(default=StarvationRule.factor, ge=0)
    starve_window_s: float = Field(default=StarvationRule.window_s, gt=0)
    # Promoted jobs, placed or waiting, hold at most this share of the cluster's GPUs
    # (longest wait first): the rest of the cluster stays with least attained service.
    starve_budget_share: float = Field(default=PlanSettings.starve_budget_share, gt=0, le=1)
    # The first job that cannot fit holds a reservation (EASY backfill) once it waited this
    # long; before, smaller jobs behind it go ahead. Off (inf) by default: on the traces,
    # reservations held for wide jobs cost 10-25% of average JCT, and starving jobs get in
    # by the guard instead. 0 gives classic EASY backfill (fill in ``max_runtime_s``).
    reserve_after_s: float = Field(default=LIVE_RESERVE_AFTER_S, ge=0)

    def starvation(self) -> StarvationRule:
        return StarvationRule(self.starve_min_wait_s, self.starve_factor, self.starve_window_s)

    def plan_settings(self) -> PlanSettings:
        """What the planner reads of these (the live cycle and the simulator's replay)."""
        return PlanSettings(
            min_runtime_s=self.min_runtime_s,
            preempt_for_service=self.preempt_for_service,
            move_to_defragment=self.move_to_defragment,
            reserve_after_s=self.reserve_after_s,
            starve_budget_share=self.starve_budget_share,
        )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")

    common: CommonSettings = Field(default_factory=CommonSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
