-- Why each pending job waits, as the scheduler's last cycle saw it: one reason from a
-- closed set, a sentence, its position in the queue, since when that reason holds.
-- Written in one batch per cycle, only for what changed (services/scheduler/cycle.py).
CREATE TABLE scheduler.pending_status (
    job_id text PRIMARY KEY REFERENCES api.jobs (id),
    reason text NOT NULL
        CHECK (reason IN ('InsufficientGPUs', 'GangDoesNotFit', 'Fragmented', 'NodesUnhealthy', 'Priority')),
    detail text NOT NULL,
    position integer NOT NULL,
    since timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
