-- A node's part, as the Kubernetes runner plays it in the launcher (kubernetes/runner.py,
-- reporting.py): claim, lease, reports. A node agent takes the same steps through its
-- node's functions (migration 0025_service_roles.sql: launcher.node_*), which check the
-- node's secret first; a change to one is a change to the other.

-- name: claim_attempt
-- Fenced claim: only the attempt's own node, only by the agent holding the node's live
-- lease (epoch $3), only from ASSIGNED, only while nobody asked to stop it or its job. A second delivery of the same assignment finds nothing to
-- claim, so nothing is launched twice.
UPDATE launcher.attempts a SET state = 'STARTING'
FROM api.jobs j
WHERE a.id = $1 AND a.node_id = $2 AND a.state = 'ASSIGNED' AND a.stop_requested_at IS NULL
  AND EXISTS (SELECT 1 FROM launcher.agents g WHERE g.node_id = $2 AND g.epoch = $3
              AND g.lost_at IS NULL AND g.lease_expires_at > now())
  AND j.id = a.job_id AND j.generation = a.generation AND j.state IN ('SCHEDULED', 'RUNNING')
  AND j.cancel_requested_at IS NULL
RETURNING a.id, a.job_id, a.generation, a.task_role, a.task_index, a.attempt_no, a.gpu_indices, j.spec,
          j.traceparent, j.username,
          -- An OpenPAI job's secrets (variable -> value), for the task's environment only.
          (SELECT COALESCE(jsonb_object_agg(s.name, s.value), '{}'::jsonb)
           FROM api.job_secrets s WHERE s.job_id = j.id) AS secrets,
          -- Every task of the generation (this one too): where it runs, its ports.
          (SELECT jsonb_agg(jsonb_build_object('task_role', p.task_role, 'task_index', p.task_index,
                                               'node_id', p.node_id, 'host', p.host, 'ports', p.ports))
           FROM launcher.attempts p WHERE p.job_id = a.job_id AND p.generation = a.generation) AS peers,
          -- The storage configs its job uses, as they are now (one deleted since is absent).
          (SELECT coalesce(jsonb_agg(jsonb_build_object('name', c.name, 'kind', c.kind, 'source', c.source,
                                                        'read_only', c.read_only)), '[]'::jsonb)
           FROM api.storage_configs c
           WHERE c.name IN (SELECT u ->> 'name' FROM jsonb_array_elements(coalesce(j.spec -> 'storage', '[]')) u))
              AS storage;

-- name: mark_attempt_running
-- The job's row is locked first (the subquery's lock is taken before the attempt's row
-- is updated): the launcher locks a job, then its attempts (a cancel's stop requests),
-- and the consequence below updates the job. Attempt first, job second would let the
-- two deadlock.
UPDATE launcher.attempts a
SET state = 'RUNNING', pid = $3, pid_start_ticks = $4, log_path = COALESCE($5, log_path), started_at = now()
FROM (SELECT j.id FROM api.jobs j JOIN launcher.attempts x ON x.job_id = j.id
      WHERE x.id = $1 FOR NO KEY UPDATE OF j) AS locked
WHERE a.id = $1 AND a.node_id = $2 AND a.state = 'STARTING' AND a.job_id = locked.id
RETURNING a.job_id, a.generation;

-- name: job_running_with_its_first_task
-- consequence of: mark_attempt_running
-- In that statement (shared.outbox.Consequence: "changed" is the attempt it marked):
-- the job's first task to run makes the job RUNNING, in the same
-- commit, so no reader sees a running task of a job still SCHEDULED. "before" is the
-- job's row as the statement found it: how long it was SCHEDULED, and its age, for the
-- launch latency metrics.
UPDATE api.jobs j SET state = 'RUNNING', version = j.version + 1, updated_at = now()
FROM changed a, api.jobs before
WHERE j.id = a.job_id AND j.generation = a.generation AND j.state = 'SCHEDULED' AND before.id = j.id
RETURNING extract(epoch FROM clock_timestamp() - before.updated_at) AS in_state_s,
          extract(epoch FROM clock_timestamp() - before.created_at) AS age_s;

-- name: mark_attempt_exited
UPDATE launcher.attempts
SET state = $3, exit_code = $4, signal = $5, reason = $6, classification = $7, finished_at = now()
WHERE id = $1 AND node_id = $2 AND state IN ('STARTING', 'RUNNING')
RETURNING job_id;

-- name: set_attempt_readiness
-- A running replica's readiness (its pod's Ready condition), fenced like the reports:
-- only the attempt's own node, only while RUNNING. A node agent makes the same update
-- through launcher.node_set_readiness (migration 0034).
UPDATE launcher.attempts SET ready = $3, ready_detail = left($4, 500), ready_changed_at = now()
WHERE id = $1 AND node_id = $2 AND state = 'RUNNING'
RETURNING id;

-- name: register_agent
-- A (re)starting agent takes a new epoch: whatever an earlier incarnation held is fenced.
-- It also says how it isolates tasks ($3, $4) and how many cores its machine has ($5).
INSERT INTO launcher.agents (node_id, epoch, lease_expires_at, isolation, isolation_detail, machine_cpus)
VALUES ($1, 1, now() + make_interval(secs => $2), $3, $4, $5)
ON CONFLICT (node_id) DO UPDATE
SET epoch = launcher.agents.epoch + 1, lease_expires_at = EXCLUDED.lease_expires_at,
    lost_at = NULL, registered_at = now(), isolation = EXCLUDED.isolation,
    isolation_detail = EXCLUDED.isolation_detail, machine_cpus = EXCLUDED.machine_cpus
RETURNING epoch;

-- name: renew_lease
UPDATE launcher.agents SET lease_expires_at = now() + make_interval(secs => $3)
WHERE node_id = $1 AND epoch = $2 AND lost_at IS NULL
RETURNING epoch;
