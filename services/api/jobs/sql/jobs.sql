-- name: insert_job
INSERT INTO api.jobs (id, name, username, virtual_cluster, priority, spec, total_gpus, state, traceparent, tags)
VALUES ($1, $2, $3, $4, $5, $6, $7, 'PENDING', $8, COALESCE($9::text[], '{}'))
RETURNING id, name, username, virtual_cluster, priority, spec, state, version, generation,
          exit_code, reason, created_at, updated_at, finished_at, cancel_requested_at, retries, not_before,
          tags;

-- name: submit_job_at_once
-- A submit with no secrets and no idempotency key, as one statement: atomic on its own,
-- so no BEGIN and COMMIT round trips (a submit's time is mostly round trips).
-- The VC check of vc_for_submit ($10 NULL: an admin; FOR SHARE: the VC cannot be
-- deleted under it), the job row of insert_job, its event's outbox row ($11-$16, from
-- shared.outbox.outbox_row), the relays' NOTIFY on channel $17 (none when NULL: the API
-- publishes the row itself once this returns), and the call's audit row
-- ($18-$23: services/api/audit.py's AuditEntry and status; none when $20, the method, is
-- NULL). No row: the VC check failed and nothing was written (submission.py then finds
-- out why).
WITH vc AS (
    SELECT v.name FROM api.virtual_clusters v
    WHERE v.name = $4
      AND ($10::text IS NULL OR v.allowed_groups IS NULL
           OR EXISTS (SELECT 1 FROM api.group_members m
                      WHERE m.username = $10 AND m.group_name = ANY (v.allowed_groups)))
    FOR SHARE OF v
), job AS (
    INSERT INTO api.jobs (id, name, username, virtual_cluster, priority, spec, total_gpus, state, traceparent, tags)
    SELECT $1, $2, $3, $4, $5, $6, $7, 'PENDING', $8, COALESCE($9::text[], '{}') FROM vc
    RETURNING id, name, username, virtual_cluster, priority, spec, state, version, generation,
              exit_code, reason, created_at, updated_at, finished_at, cancel_requested_at, retries,
              not_before, tags
), event AS (
    INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
    SELECT $11, $12, $13, $14, $15, $16 FROM job
    RETURNING id
), audit AS (
    -- (A data-modifying WITH runs whether or not the query reads it.)
    INSERT INTO api.audit_log (username, token_id, method, route, target, status, client)
    SELECT $18, $19, $20, $21, job.id, $22, $23 FROM job WHERE $20::text IS NOT NULL
)
SELECT job.* FROM job,
    (SELECT count(pg_notify($17, $14::text)) FROM event WHERE $17::text IS NOT NULL) AS notified;

-- name: get_job
-- With why it waits, when it is pending (the scheduler's last word: scheduler.pending_status),
-- and where it stands in the queue (scheduler.queue_positions: the last cycle's order).
SELECT j.id, name, username, virtual_cluster, priority, spec, state, version, generation,
       exit_code, j.reason, created_at, j.updated_at, finished_at, cancel_requested_at, retries, not_before,
       tags, p.reason AS pending_reason, p.detail AS pending_detail, q.position AS pending_position,
       p.since AS pending_since, p.estimated_start AS pending_estimated_start
FROM api.jobs j LEFT JOIN scheduler.pending_status p ON p.job_id = j.id AND j.state = 'PENDING'
LEFT JOIN scheduler.queue_positions q ON q.job_id = p.job_id
WHERE j.id = $1;

-- name: list_jobs
-- Newest first, filtered; $8/$9 is the keyset cursor (created_at, id of the last row of
-- the previous page). $3 is the owner for a user's list (admins: any, or the filter).
SELECT j.id, name, username, virtual_cluster, priority, spec, state, version, generation,
       exit_code, j.reason, created_at, j.updated_at, finished_at, cancel_requested_at, retries, not_before,
       tags, p.reason AS pending_reason, p.detail AS pending_detail, q.position AS pending_position,
       p.since AS pending_since, p.estimated_start AS pending_estimated_start
FROM api.jobs j LEFT JOIN scheduler.pending_status p ON p.job_id = j.id AND j.state = 'PENDING'
LEFT JOIN scheduler.queue_positions q ON q.job_id = p.job_id
WHERE ($1::text[] IS NULL OR j.state = ANY ($1))
  AND ($2::text IS NULL OR j.virtual_cluster = $2)
  AND ($3::text IS NULL OR j.username = $3)
  AND ($4::text IS NULL OR j.name = $4)
  AND ($5::text[] IS NULL OR j.tags @> $5)
  AND ($6::timestamptz IS NULL OR j.created_at >= $6)
  AND ($7::timestamptz IS NULL OR j.created_at < $7)
  AND ($8::timestamptz IS NULL OR (j.created_at, j.id) < ($8, $9::text))
ORDER BY j.created_at DESC, j.id DESC
LIMIT $10;

-- name: attempts_of_job
SELECT id, generation, task_role, task_index, attempt_no, node_id, host, ports, gpu_indices, state,
       exit_code, signal, reason, classification, stop_reason, log_path, created_at, started_at,
       finished_at, gpu_memory_used_mb
FROM launcher.attempts WHERE job_id = $1
ORDER BY task_role, task_index, attempt_no;

-- name: latest_attempt_of_task
-- What the API needs to ask the attempt's node for its log (logs.py).
SELECT id, job_id, task_role, task_index, attempt_no, node_id, state, log_path, finished_at
FROM launcher.attempts
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

-- name: claim_idempotency_key
-- The key for this request, unless a live one holds it (then nothing is returned and the
-- caller reads it). An expired row is taken over. A concurrent claim of the same key
-- waits here until the first commits or rolls back.
INSERT INTO api.idempotency_keys (username, key, request_sha256, job_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (username, key) DO UPDATE
SET request_sha256 = EXCLUDED.request_sha256, job_id = EXCLUDED.job_id, created_at = now()
WHERE api.idempotency_keys.created_at < now() - make_interval(secs => $5)
RETURNING job_id;

-- name: idempotency_key
SELECT request_sha256, job_id FROM api.idempotency_keys WHERE username = $1 AND key = $2;

-- name: sweep_idempotency_keys
-- A bounded batch of expired keys; every keyed submit sweeps one.
DELETE FROM api.idempotency_keys WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM api.idempotency_keys
    WHERE created_at < now() - make_interval(secs => $1) LIMIT 100));

-- name: insert_job_secrets
INSERT INTO api.job_secrets (job_id, name, value)
SELECT $1, name, value FROM unnest($2::text[], $3::text[]) AS s (name, value);

-- name: copy_job_secrets
INSERT INTO api.job_secrets (job_id, name, value)
SELECT $2, name, value FROM api.job_secrets WHERE job_id = $1;

-- name: set_job_tags
UPDATE api.jobs SET tags = $2 WHERE id = $1 RETURNING tags;

-- name: vc_for_submit
-- Held FOR SHARE by the submit's transaction, so the VC cannot be deleted under it.
-- Whether $2 may use it (NULL: an admin, who may use every VC).
SELECT ($2::text IS NULL OR v.allowed_groups IS NULL
        OR EXISTS (SELECT 1 FROM api.group_members m WHERE m.username = $2 AND m.group_name = ANY (v.allowed_groups)))
       AS usable
FROM api.virtual_clusters v WHERE v.name = $1 FOR SHARE OF v;

-- name: cluster_shape
-- Every registered node (ready or not) with its GPU count and model, and whether it runs
-- task images (a container runtime, or Kubernetes' pods): what any job could ever get. Read
-- by the submit checks (admission.py), cached for a few seconds.
SELECT n.id, greatest(n.gpu_count, n.expected_gpus) AS gpus, min(g.model) AS model, n.cpus, n.memory_mb,
       n.container_runtime <> ''
           OR EXISTS (SELECT 1 FROM launcher.agents a WHERE a.node_id = n.id AND a.isolation = 'pod')
           AS runs_images
FROM monitor.nodes n LEFT JOIN monitor.gpus g ON g.node_id = n.id
GROUP BY n.id;

-- name: node_last_heard
-- Since when a node's agent (or the launcher, for a pod node) has been silent: it renews
-- its lease while it runs (lease_expires_at), and lost_at says when the node was declared
-- lost for want of it (logs.py says so when the node does not answer).
SELECT lease_expires_at, lost_at FROM launcher.agents WHERE node_id = $1;
