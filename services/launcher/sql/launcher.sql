-- name: lock_job
SELECT id, state, version, generation, spec FROM api.jobs WHERE id = $1 FOR UPDATE;

-- name: allocations_of_generation
SELECT task_role, task_index, node_id, gpu_indices FROM scheduler.allocations
WHERE job_id = $1 AND generation = $2 ORDER BY task_role, task_index;

-- name: insert_attempt
INSERT INTO launcher.attempts
    (id, job_id, generation, task_role, task_index, attempt_no, node_id, gpu_indices, state)
VALUES ($1, $2, $3, $4, $5, $3, $6, $7, 'ASSIGNED')
ON CONFLICT DO NOTHING
RETURNING id;

-- name: attempts_of_generation
SELECT id, task_role, task_index, state, exit_code, signal, reason, finished_at
FROM launcher.attempts WHERE job_id = $1 AND generation = $2
ORDER BY finished_at NULLS LAST, id;

-- name: set_job_state
UPDATE api.jobs
SET state = $2, version = version + 1, updated_at = now(),
    exit_code = COALESCE($3, exit_code), reason = COALESCE($4, reason),
    finished_at = CASE WHEN $2 IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN now() ELSE finished_at END
WHERE id = $1
RETURNING version;

-- name: scheduled_jobs_without_attempts
SELECT j.id, j.generation FROM api.jobs j
WHERE j.state = 'SCHEDULED'
  AND NOT EXISTS (SELECT 1 FROM launcher.attempts a WHERE a.job_id = j.id AND a.generation = j.generation);

-- name: active_jobs_with_all_attempts_done
SELECT j.id FROM api.jobs j
WHERE j.state IN ('SCHEDULED', 'RUNNING')
  AND EXISTS (SELECT 1 FROM launcher.attempts a WHERE a.job_id = j.id AND a.generation = j.generation)
  AND NOT EXISTS (SELECT 1 FROM launcher.attempts a WHERE a.job_id = j.id AND a.generation = j.generation
                  AND a.state IN ('ASSIGNED', 'STARTING', 'RUNNING'));

-- name: running_jobs_still_scheduled
SELECT DISTINCT j.id FROM api.jobs j JOIN launcher.attempts a
  ON a.job_id = j.id AND a.generation = j.generation
WHERE j.state = 'SCHEDULED' AND a.state IN ('RUNNING', 'EXITED');
