-- The jobs that finished after a moment, in the order they finished: the scheduler folds
-- them into the starvation limit's typical wait once a minute, and a new leader reads
-- four weeks of them (services/scheduler/sql/scheduler.sql, finished_waits). Without an
-- index each read scanned every job ever submitted.
CREATE INDEX jobs_finished ON api.jobs (finished_at) WHERE finished_at IS NOT NULL;
