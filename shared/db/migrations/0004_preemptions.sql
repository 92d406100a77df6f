-- 0004 preemptions: the scheduler's decisions to take a running job's GPUs back.
--
-- Why a table of its own: a preemption is a scheduler decision (DESIGN.md §1) that the
-- launcher carries out (stop the tasks with their grace period, then requeue the job
-- without counting a retry). One row per job generation: deciding twice is harmless.

CREATE TABLE scheduler.preemptions (
    job_id text NOT NULL REFERENCES api.jobs (id),
    generation integer NOT NULL,
    reason text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, generation)
);
