-- name: claim_attempt
-- Fenced claim: only the attempt's own node, only from ASSIGNED. A second delivery of
-- the same assignment finds nothing to claim, so nothing is launched twice.
UPDATE launcher.attempts a SET state = 'STARTING'
FROM api.jobs j
WHERE a.id = $1 AND a.node_id = $2 AND a.state = 'ASSIGNED'
  AND j.id = a.job_id AND j.generation = a.generation AND j.state IN ('SCHEDULED', 'RUNNING')
RETURNING a.id, a.job_id, a.generation, a.task_role, a.task_index, a.attempt_no, a.gpu_indices, j.spec;

-- name: mark_attempt_running
UPDATE launcher.attempts
SET state = 'RUNNING', pid = $3, pid_start_ticks = $4, log_path = $5, started_at = now()
WHERE id = $1 AND node_id = $2 AND state = 'STARTING'
RETURNING job_id;

-- name: mark_attempt_exited
UPDATE launcher.attempts
SET state = $3, exit_code = $4, signal = $5, reason = $6, finished_at = now()
WHERE id = $1 AND node_id = $2 AND state IN ('STARTING', 'RUNNING')
RETURNING job_id;

-- name: live_attempts_on_node
SELECT id, job_id, state, pid, pid_start_ticks, log_path FROM launcher.attempts
WHERE node_id = $1 AND state IN ('ASSIGNED', 'STARTING', 'RUNNING');
