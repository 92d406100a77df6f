"""Scheduler settings: ``CORRAL_SCHEDULER_*`` plus the common groups."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.scheduler.model import LIVE_RESERVE_AFTER_S, PlanSettings
from services.scheduler.starvation import StarvationRule
from shared.settings import CommonSettings


class SchedulerSettings(BaseSettings):
    """The scheduler: how often it plans, and the policy's knobs."""

    model_config = SettingsConfigDict(
        env_prefix="CORRAL_SCHEDULER_", extra="ignore", use_attribute_docstrings=True
    )

    cycle_interval_s: float = Field(default=2.0, gt=0)
    """The periodic scheduling cycle. Job and node events wake a cycle at once; this one
    catches whatever they missed."""
    min_cycle_gap_s: float = Field(default=0.02, ge=0, le=10)
    """A woken cycle starts at least this long after the last one ended (Slurm's
    ``sched_min_interval``): under a stream of events, those of these milliseconds share a
    cycle instead of a cycle each (cycle.py)."""
    leader_retry_s: float = Field(default=1.0, gt=0)
    """How often a standby scheduler tries to become the leader (one advisory lock: a
    single active scheduler)."""
    min_runtime_s: float = Field(default=300.0, ge=0)
    """A job runs at least this long before a higher-priority job, or one with less
    attained service, may preempt it. Reclaiming a VC's quota from borrowers does not wait
    (planner.py)."""
    preempt_for_service: bool = True
    """Least attained service (planner.py): a job may preempt same-priority jobs of its VC
    (or borrowed ones) that were served much more. Off: only quota and priority preempt."""
    move_to_defragment: bool = True
    """Moves (moves.py): small borrowed jobs are moved off a node so that a job that the
    free GPUs could hold, but no one node's, fits there (they restart at once in other
    nodes' free GPUs). Off: such a job waits (``Fragmented``)."""
    starve_min_wait_s: float = Field(default=StarvationRule.min_wait_s, gt=0)
    """Starvation guard (starvation.py): a job pending longer than ``starve_factor`` times
    the typical wait, and at least this long, ranks first and may preempt."""
    starve_factor: float = Field(default=StarvationRule.factor, ge=0)
    """Starvation guard: how many times the typical wait (finished jobs' queueing delay) a
    job must wait before it ranks first."""
    starve_window_s: float = Field(default=StarvationRule.window_s, gt=0)
    """Starvation guard: the time constant of the moving average that gives the typical
    wait. The guard's defaults are those with which the live policy (with moves) keeps its
    tail waits no worse than FIFO with EASY backfill on the trace replays
    (docs/performance.md)."""
    starve_budget_share: float = Field(default=PlanSettings.starve_budget_share, gt=0, le=1)
    """The share of the cluster's GPUs that promoted (starving) jobs, placed or waiting,
    may hold at most, longest wait first: the rest stays with least attained service."""
    reserve_after_s: float = Field(default=LIVE_RESERVE_AFTER_S, ge=0)
    """The first job that cannot fit holds a reservation (EASY backfill) once it waited
    this long; before, smaller jobs behind it go ahead. Off (``inf``) by default: on the
    trace replays, reservations held for wide jobs cost more average JCT than they saved,
    and starving jobs get in by the guard instead (docs/performance.md). 0 gives classic
    EASY backfill (fill in ``max_runtime_s``)."""

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
