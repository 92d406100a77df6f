-- The pending jobs in the order the scheduler's last cycle took them: one row holding
-- their ids, written in the cycle's transaction only when the order changed. A job's
-- position in the queue is where its id stands in it (1-based).
--
-- The position used to be a column of every scheduler.pending_status row: one job
-- starting moved every job behind it, so each cycle rewrote a row per waiting job (78
-- row updates per job in bench.e2e, where 1,000 jobs queue for 8 GPUs). One array per
-- cycle costs one row; pending_status now changes only when a job's reason, detail or
-- estimate does.
CREATE TABLE scheduler.queue_order (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    job_ids text[] NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO scheduler.queue_order (job_ids)
SELECT coalesce(array_agg(job_id ORDER BY position), '{}') FROM scheduler.pending_status;

ALTER TABLE scheduler.pending_status DROP COLUMN position;
