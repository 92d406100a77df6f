-- name: attempt_ran_s
-- How long an ended attempt ran, in seconds (0 when it never started).
SELECT coalesce(extract(epoch FROM (finished_at - started_at)), 0)::float8
FROM launcher.attempts WHERE id = $1;
