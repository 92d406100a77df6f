-- Each waiting job's position (1-based), derived from scheduler.queue_order: the one
-- place that says how, for the API's job reads, the alerter's pending-job alerts and
-- anyone else who asks "where does this job stand?".
CREATE VIEW scheduler.queue_positions AS
SELECT u.job_id, u.position::integer AS position
FROM scheduler.queue_order, unnest(job_ids) WITH ORDINALITY AS u(job_id, position);
