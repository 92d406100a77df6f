-- name: attempt
-- An attempt as the artifact server checks a node's request against it: whose node it
-- is, whether it is live, its task and its job's spec.
SELECT a.id, a.job_id, a.generation, a.task_role, a.task_index, a.node_id, a.state,
       a.state IN ('ASSIGNED', 'STARTING', 'RUNNING') AS live, j.spec
FROM launcher.attempts a JOIN api.jobs j ON j.id = a.job_id
WHERE a.id = $1;

-- name: job_inputs
-- A job's inputs as pinned at submit, with the manifest of the artifact each resolved to
-- (NULL: that artifact is gone, which a start reports).
SELECT i.position, i.ref, i.path, ar.manifest
FROM api.job_inputs i LEFT JOIN launcher.artifacts ar ON ar.id = i.artifact_id
WHERE i.job_id = $1
ORDER BY i.position;

-- name: checkpoint
-- What the same task ($1 job, $2 role, $3 index) left in its latest attempt other than
-- $4: restored into the new attempt's output directory before it starts.
SELECT t.manifest
FROM launcher.task_outputs t JOIN launcher.attempts a ON a.id = t.attempt_id
WHERE t.job_id = $1 AND t.task_role = $2 AND t.task_index = $3 AND t.attempt_id <> $4
ORDER BY a.created_at DESC, a.attempt_no DESC
LIMIT 1;

-- name: record_task_outputs
-- An attempt's whole, verified upload. Sent again (an agent that restarted mid-report),
-- the newer manifest wins: it is of the same directory, read later.
INSERT INTO launcher.task_outputs (attempt_id, job_id, task_role, task_index, manifest, size_bytes)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (attempt_id) DO UPDATE
SET manifest = EXCLUDED.manifest, size_bytes = EXCLUDED.size_bytes, created_at = now();

-- name: succeeded_outputs
-- The succeeded attempts of a job's generation ($1, $2) and what each uploaded
-- (``saved`` false: nothing was recorded for it).
SELECT a.id, a.task_role, a.task_index, a.reason, t.manifest, t.attempt_id IS NOT NULL AS saved
FROM launcher.attempts a LEFT JOIN launcher.task_outputs t ON t.attempt_id = a.id
WHERE a.job_id = $1 AND a.generation = $2 AND a.state = 'EXITED' AND a.exit_code = 0
ORDER BY a.task_role, a.task_index;

-- name: insert_artifact
-- One declared output of a succeeded job. A job succeeds once (its row is locked by the
-- decision), so a conflict is a replay of the same decision: nothing to add.
INSERT INTO launcher.artifacts (id, job_id, output, manifest, files, size_bytes, sha256)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (job_id, output) DO NOTHING;
