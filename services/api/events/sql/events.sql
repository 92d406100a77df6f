-- name: job_scope
-- Who owns a job and its VC: what event visibility and the VC filter need (never changes).
SELECT username, virtual_cluster FROM api.jobs WHERE id = $1;

-- name: alert_job
-- The job an alert is about, for the events that do not carry the alert's labels.
SELECT labels->>'job' AS job FROM alerter.alerts WHERE id = $1;
