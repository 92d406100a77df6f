-- name: job_for_session
-- The job with what a session into it needs: its owner and state, its spec (the tasks,
-- their ports and proxy_prefix), and whether its VC lets its owners in (a VC deleted
-- since: on, as a new VC is).
SELECT j.id, j.username, j.state, j.spec, j.generation, j.virtual_cluster,
       coalesce(v.interactive, true) AS interactive
FROM api.jobs j LEFT JOIN api.virtual_clusters v ON v.name = j.virtual_cluster
WHERE j.id = $1;

-- name: latest_attempt_of_task
-- The task's attempt of the job's newest generation that was tried last: the one a session
-- goes into when it runs.
SELECT id, node_id, state, ports, generation, attempt_no
FROM launcher.attempts
WHERE job_id = $1 AND task_role = $2 AND task_index = $3
ORDER BY generation DESC, attempt_no DESC LIMIT 1;

-- name: insert_session
INSERT INTO api.interactive_sessions (id, kind, job_id, task_role, task_index, attempt_id, node_id, username,
                                      token_id, credential_sha256, command, tty, stdin, cols, rows, port_label,
                                      port, connected_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
        CASE WHEN $18::boolean THEN now() END)
RETURNING created_at;

-- name: claim_connection
-- The session's WebSocket connects: once ($1 unconnected and not closed), with the
-- credential that asked for it ($2), within $3 seconds of asking.
UPDATE api.interactive_sessions SET connected_at = now()
WHERE id = $1 AND credential_sha256 = $2 AND connected_at IS NULL AND closed_at IS NULL
  AND created_at > now() - make_interval(secs => $3)
RETURNING id, kind, job_id, task_role, task_index, attempt_id, node_id, username, command, tty, stdin, cols,
          rows, port_label, port;

-- name: session_state
-- Why a claim failed: what the session row says.
SELECT credential_sha256, connected_at, closed_at, created_at,
       created_at <= now() - make_interval(secs => $2) AS too_late
FROM api.interactive_sessions WHERE id = $1;

-- name: record_close
-- The session ended; the first end recorded stands.
UPDATE api.interactive_sessions
SET closed_at = now(), close_reason = $2, exit_code = $3, bytes_in = $4, bytes_out = $5
WHERE id = $1 AND closed_at IS NULL;

-- name: list_sessions
-- Newest first; $1: into one job only; $2: into the jobs this user owns (NULL: into any,
-- for admins): an owner sees every session into their jobs, an admin's included.
SELECT s.id, s.kind, s.job_id, s.task_role, s.task_index, s.attempt_id, s.node_id, s.username, s.token_id,
       s.command, s.port_label, s.created_at, s.connected_at, s.closed_at, s.close_reason, s.exit_code,
       s.bytes_in, s.bytes_out
FROM api.interactive_sessions s
WHERE ($1::text IS NULL OR s.job_id = $1)
  AND ($2::text IS NULL OR EXISTS (SELECT 1 FROM api.jobs j WHERE j.id = s.job_id AND j.username = $2))
ORDER BY s.created_at DESC, s.id DESC
LIMIT $3;

-- name: forget_old_sessions
-- At most $2 rows older than $1 seconds, oldest first (interactive_sessions_by_age).
DELETE FROM api.interactive_sessions
WHERE id IN (SELECT id FROM api.interactive_sessions
             WHERE created_at < now() - make_interval(secs => $1) ORDER BY created_at LIMIT $2);
