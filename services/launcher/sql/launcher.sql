-- name: lock_job
SELECT j.id, j.state, j.version, j.generation, j.spec, j.retries, j.cancel_requested_at,
       (SELECT p.reason FROM scheduler.preemptions p
        WHERE p.job_id = j.id AND p.generation = j.generation) AS preempt_reason
FROM api.jobs j WHERE j.id = $1 FOR UPDATE OF j;

-- name: lock_placement_nodes
-- The nodes generation $2 of job $1 is placed on, locked for handing out their ports
-- until the transaction ends, in the order of their keys (two placements sharing nodes
-- never wait on each other, even where two nodes' keys collide). Placements on other
-- nodes go on side by side; two on one node take turns, and the second reads the ports
-- the first committed.
SELECT count(pg_advisory_xact_lock(hashtext('corral.node_ports'), node_key))
FROM (SELECT DISTINCT hashtext(node_id) AS node_key FROM scheduler.allocations
      WHERE job_id = $1 AND generation = $2 ORDER BY node_key) AS nodes;

-- name: lock_job_with_allocations
-- lock_job, with the placement of generation $2 (the task instances with no attempt of
-- that generation yet) and the ports live attempts hold on its nodes: one round trip,
-- not three. The allocations were committed before the job.scheduled that brought us
-- here, so the statement's snapshot has them even when it waited for the job's lock. The
-- caller holds its nodes' locks (lock_placement_nodes), taken in an earlier statement,
-- so the ports read here include every placement on them committed before.
SELECT j.id, j.state, j.version, j.generation, j.spec, j.retries, j.cancel_requested_at,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'task_role', a.task_role, 'task_index', a.task_index, 'node_id', a.node_id,
                   'gpu_indices', a.gpu_indices, 'host', coalesce(n.address, '127.0.0.1'))
               ORDER BY a.task_role, a.task_index), '[]')
        FROM scheduler.allocations a LEFT JOIN monitor.nodes n ON n.id = a.node_id
        WHERE a.job_id = j.id AND a.generation = $2
          AND NOT EXISTS (SELECT 1 FROM launcher.attempts x
                          WHERE x.job_id = a.job_id AND x.generation = a.generation
                            AND x.task_role = a.task_role AND x.task_index = a.task_index)) AS allocations,
       (SELECT coalesce(jsonb_object_agg(used.node_id, used.ports), '{}')
        FROM (SELECT x.node_id, jsonb_agg(port) AS ports
              FROM launcher.attempts x, jsonb_each(x.ports) AS labelled(label, numbers),
                   jsonb_array_elements(labelled.numbers) AS port
              WHERE x.state IN ('ASSIGNED', 'STARTING', 'RUNNING')
                AND x.node_id IN (SELECT a.node_id FROM scheduler.allocations a
                                  WHERE a.job_id = j.id AND a.generation = $2)
              GROUP BY x.node_id) AS used) AS ports_in_use
FROM api.jobs j WHERE j.id = $1 FOR UPDATE OF j;

-- name: insert_attempt
INSERT INTO launcher.attempts
    (id, job_id, generation, task_role, task_index, attempt_no, node_id, gpu_indices, state, host, ports)
VALUES ($1, $2, $3, $4, $5, $3, $6, $7, 'ASSIGNED', $8, $9)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: attempts_of_generation
SELECT id, task_role, task_index, node_id, state, exit_code, signal, reason, classification,
       stop_requested_at, finished_at
FROM launcher.attempts WHERE job_id = $1 AND generation = $2
ORDER BY finished_at NULLS LAST, id;

-- name: request_stop
UPDATE launcher.attempts SET stop_requested_at = now(), stop_reason = $2, stop_platform = $3
WHERE id = $1 AND stop_requested_at IS NULL AND state IN ('STARTING', 'RUNNING')
RETURNING node_id;

-- name: stop_unstarted
-- An attempt no agent has claimed yet is simply ended: it never ran.
UPDATE launcher.attempts
SET state = 'EXITED', stop_requested_at = now(), stop_reason = $2,
    reason = 'stopped before it started: ' || $2, finished_at = now()
WHERE id = $1 AND state = 'ASSIGNED'
RETURNING id;

-- name: set_job_state
UPDATE api.jobs
SET state = $2, version = version + 1, updated_at = now(),
    exit_code = COALESCE($3, exit_code), reason = COALESCE($4, reason),
    finished_at = CASE WHEN $2 IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN now() ELSE finished_at END
WHERE id = $1
RETURNING version;

-- name: requeue_job
UPDATE api.jobs
SET state = 'PENDING', version = version + 1, updated_at = now(), retries = $2,
    not_before = now() + make_interval(secs => $3), reason = $4
WHERE id = $1
RETURNING not_before;

-- name: scheduled_jobs_without_attempts
SELECT j.id, j.generation FROM api.jobs j
WHERE j.state = 'SCHEDULED'
  AND NOT EXISTS (SELECT 1 FROM launcher.attempts a WHERE a.job_id = j.id AND a.generation = j.generation);

-- name: active_jobs_to_evaluate
-- Jobs whose attempts may call for a decision: any attempt ended, or a cancel requested.
SELECT j.id FROM api.jobs j
WHERE j.state IN ('SCHEDULED', 'RUNNING')
  AND (j.cancel_requested_at IS NOT NULL
       OR EXISTS (SELECT 1 FROM scheduler.preemptions p WHERE p.job_id = j.id AND p.generation = j.generation)
       OR EXISTS (SELECT 1 FROM launcher.attempts a WHERE a.job_id = j.id AND a.generation = j.generation
                  AND a.state IN ('EXITED', 'LOST')));

-- name: declare_lost_agents
-- Agents whose lease ran out: fence them (new epoch) and say when they were lost. Not in
-- the first $1 seconds after Postgres itself (re)started: no agent could renew while it
-- was down, and killing every node's work for a database restart would be the outage's fault.
UPDATE launcher.agents SET epoch = epoch + 1, lost_at = now()
WHERE lost_at IS NULL AND lease_expires_at < now()
  AND now() - pg_postmaster_start_time() > make_interval(secs => $1)
RETURNING node_id, lease_expires_at;

-- name: live_attempts_on_lost_nodes
SELECT a.id, a.job_id, a.node_id, g.lease_expires_at
FROM launcher.attempts a JOIN launcher.agents g ON g.node_id = a.node_id
WHERE g.lost_at IS NOT NULL AND a.state IN ('ASSIGNED', 'STARTING', 'RUNNING');

-- name: mark_attempt_lost
UPDATE launcher.attempts
SET state = 'LOST', classification = 'transient', reason = $2, finished_at = now()
WHERE id = $1 AND state IN ('ASSIGNED', 'STARTING', 'RUNNING')
RETURNING job_id, node_id;

-- name: delete_older_job_keys
-- An MPI job's new generation: the keys of its earlier ones are no node's any more.
DELETE FROM launcher.job_ssh_keys WHERE job_id = $1 AND generation < $2;

-- name: insert_job_keys
-- A redelivered placement finds the generation's keys made already, and keeps them.
INSERT INTO launcher.job_ssh_keys
    (job_id, generation, user_private_key, user_public_key, host_private_key, host_public_key)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (job_id, generation) DO NOTHING;

-- name: delete_job_keys
DELETE FROM launcher.job_ssh_keys WHERE job_id = $1;
