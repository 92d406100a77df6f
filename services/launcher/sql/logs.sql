-- name: expired_task_logs
-- Of the log files a node found ($1-$4: job ids, roles, task indexes, attempt numbers;
-- one file each, numbered from 1 as ``ord``), those whose attempt ended (EXITED or LOST)
-- more than $5 seconds ago: the node deletes them (services/launcher/log_retention.py).
-- A live attempt's log, or one of an attempt Postgres does not know, is never among them.
-- ``job_ended``: no attempt of the job can start any more, so its directories may go.
SELECT f.ord, j.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') AS job_ended
FROM unnest($1::text[], $2::text[], $3::integer[], $4::integer[]) WITH ORDINALITY
     AS f(job_id, task_role, task_index, attempt_no, ord)
JOIN launcher.attempts a ON a.job_id = f.job_id AND a.task_role = f.task_role
     AND a.task_index = f.task_index AND a.attempt_no = f.attempt_no
JOIN api.jobs j ON j.id = a.job_id
WHERE a.state IN ('EXITED', 'LOST') AND a.finished_at < now() - make_interval(secs => $5);
