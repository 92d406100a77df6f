-- 0028 job GPU usage: each job's GPU readings summed per day, for usage reports.
--
-- "GPU-hours used" of a job over a day is its GPU-hours held weighted by the mean
-- utilisation its GPUs reported. Reading that from monitor.gpu_history means every 5-minute
-- row of every GPU in the window (4,000 GPUs: 1.15 M rows a day, 35 M for the month kept),
-- so the monitor folds each coarse bucket into one row per (day, job) once the bucket is
-- final (services/monitor/sql/monitor.sql, roll_up_job_usage), and a month of usage is a
-- few thousand rows. The mark says up to where the coarse buckets have been folded, so
-- each is counted exactly once, whatever the upkeep's timing.

CREATE TABLE monitor.job_gpu_usage_daily (
    day date NOT NULL,               -- UTC
    job_id text NOT NULL,
    samples bigint NOT NULL,         -- GPU readings (per GPU, per heartbeat)
    utilization_sum double precision NOT NULL,  -- the sum of those readings' utilisation, in %
    PRIMARY KEY (day, job_id)
);

CREATE TABLE monitor.job_gpu_usage_mark (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    folded_until timestamptz NOT NULL  -- coarse buckets starting before this are in the table
);
INSERT INTO monitor.job_gpu_usage_mark (folded_until) VALUES ('-infinity');

GRANT SELECT, INSERT, UPDATE, DELETE ON monitor.job_gpu_usage_daily TO corral_monitor;
GRANT SELECT, UPDATE ON monitor.job_gpu_usage_mark TO corral_monitor;
GRANT SELECT ON monitor.job_gpu_usage_daily, monitor.job_gpu_usage_mark TO corral_api;
