-- name: insert_job
INSERT INTO api.jobs (id, name, username, virtual_cluster, priority, spec, total_gpus, state, traceparent)
VALUES ($1, $2, $3, $4, $5, $6, $7, 'PENDING', $8)
RETURNING id, name, username, virtual_cluster, priority, spec, state, version, generation,
          exit_code, reason, created_at, updated_at, finished_at, cancel_requested_at, retries, not_before;

-- name: get_job
-- With why it waits, when it is pending (the scheduler's last word: scheduler.pending_status).
SELECT j.id, name, username, virtual_cluster, priority, spec, state, version, generation,
       exit_code, j.reason, created_at, j.updated_at, finished_at, cancel_requested_at, retries, not_before,
       p.reason AS pending_reason, p.detail AS pending_detail, p.position AS pending_position,
       p.since AS pending_since, p.estimated_start AS pending_estimated_start
FROM api.jobs j LEFT JOIN scheduler.pending_status p ON p.job_id = j.id AND j.state = 'PENDING'
WHERE j.id = $1;

-- name: list_jobs
SELECT j.id, name, username, virtual_cluster, priority, spec, state, version, generation,
       exit_code, j.reason, created_at, j.updated_at, finished_at, cancel_requested_at, retries, not_before,
       p.reason AS pending_reason, p.detail AS pending_detail, p.position AS pending_position,
       p.since AS pending_since, p.estimated_start AS pending_estimated_start
FROM api.jobs j LEFT JOIN scheduler.pending_status p ON p.job_id = j.id AND j.state = 'PENDING'
WHERE ($1::text IS NULL OR state = $1)
ORDER BY created_at DESC, id DESC
LIMIT $2;

-- name: attempts_of_job
SELECT id, generation, task_role, task_index, attempt_no, node_id, host, ports, gpu_indices, state,
       exit_code, signal, reason, classification, stop_reason, log_path, created_at, started_at,
       finished_at
FROM launcher.attempts WHERE job_id = $1
ORDER BY task_role, task_index, attempt_no;

-- name: latest_attempt_of_task
SELECT id, attempt_no, state, log_path FROM launcher.attempts
WHERE job_id = $1 AND task_role = $2 AND task_index = $3
  AND ($4::integer IS NULL OR attempt_no = $4)
ORDER BY attempt_no DESC LIMIT 1;

-- name: lock_job
SELECT id, username, state, version, generation, cancel_requested_at FROM api.jobs WHERE id = $1 FOR UPDATE;

-- name: cancel_pending_job
UPDATE api.jobs
SET state = 'CANCELLED', version = version + 1, updated_at = now(), finished_at = now(),
    cancel_requested_at = now(), reason = 'cancelled by ' || $2 || ' before it was scheduled'
WHERE id = $1 AND state = 'PENDING';

-- name: request_cancel
UPDATE api.jobs SET cancel_requested_at = now(), updated_at = now()
WHERE id = $1 AND cancel_requested_at IS NULL;

-- name: attempt_state
SELECT state FROM launcher.attempts WHERE id = $1;
