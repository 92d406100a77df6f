-- Whether the scheduler's starvation guard placed the job (services/scheduler/levels.py):
-- such a job is never preempted for service and counts against the guard's GPU budget
-- until it ends. Kept with the allocation because the planner is stateless between
-- cycles, and the load-aware limit moves: judged again by its wait, a job promoted under
-- a lower limit could lose its protection halfway through its run. Allocations made
-- before this column existed read as not promoted.
ALTER TABLE scheduler.allocations ADD COLUMN promoted boolean NOT NULL DEFAULT false;
