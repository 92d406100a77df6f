-- name: insert_service
-- A new service at revision 1; nothing when the name is taken (the caller says 409).
INSERT INTO api.services (name, owner, virtual_cluster, spec, replicas, public)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (name) DO NOTHING
RETURNING name, owner, virtual_cluster, revision, spec, replicas, public, deleting_at, blocked_reason,
       created_at, updated_at;

-- name: get_service
SELECT name, owner, virtual_cluster, revision, spec, replicas, public, deleting_at, blocked_reason,
       created_at, updated_at
FROM api.services WHERE name = $1;

-- name: lock_service
-- The controller's and the routes' changes to one service serialise on its row.
SELECT name, owner, virtual_cluster, revision, spec, replicas, public, deleting_at, blocked_reason,
       created_at, updated_at
FROM api.services WHERE name = $1 FOR UPDATE;

-- name: list_services
-- $1: the owner (NULL: every service, for admins).
SELECT name, owner, virtual_cluster, revision, spec, replicas, public, deleting_at, blocked_reason,
       created_at, updated_at
FROM api.services WHERE $1::text IS NULL OR owner = $1
ORDER BY name;

-- name: set_replicas
UPDATE api.services SET replicas = $2, spec = $3, updated_at = now()
WHERE name = $1 AND deleting_at IS NULL;

-- name: set_template
-- A new template is a new revision: the controller rolls the replicas over to it.
UPDATE api.services
SET spec = $2, replicas = $3, public = $4, virtual_cluster = $5, revision = revision + 1, updated_at = now()
WHERE name = $1 AND deleting_at IS NULL
RETURNING revision;

-- name: mark_deleting
UPDATE api.services SET deleting_at = coalesce(deleting_at, now()), updated_at = now()
WHERE name = $1;

-- name: delete_service
-- Once every replica's job has ended; the replica rows go with it (ON DELETE CASCADE).
DELETE FROM api.services WHERE name = $1;

-- name: replicas_of
-- Each replica of the services named ($1), with its job and its latest attempt: what the
-- status shows and the controller decides on. restarts: placements after the first (a
-- crash, a preemption, a lost node each place the job again).
SELECT r.service, r.job_id, r.revision, r.created_at, r.draining_at,
       extract(epoch FROM now() - r.draining_at)::float8 AS drained_s,
       j.state AS job_state, j.reason AS job_reason, j.not_before, j.cancel_requested_at,
       j.retries, greatest(j.generation - 1, 0) AS restarts,
       p.detail AS pending_detail,
       a.state AS attempt_state, coalesce(a.ready, false) AS ready, coalesce(a.ready_detail, '') AS ready_detail,
       a.node_id
FROM api.service_replicas r
JOIN api.jobs j ON j.id = r.job_id
LEFT JOIN scheduler.pending_status p ON p.job_id = j.id AND j.state = 'PENDING'
LEFT JOIN LATERAL (
    SELECT la.state, la.ready, la.ready_detail, la.node_id
    FROM launcher.attempts la WHERE la.job_id = r.job_id
    ORDER BY la.generation DESC, la.attempt_no DESC
    LIMIT 1
) a ON true
WHERE r.service = ANY($1::text[])
ORDER BY r.service, r.created_at, r.job_id;

-- name: insert_replica
INSERT INTO api.service_replicas (job_id, service, revision) VALUES ($1, $2, $3);

-- name: mark_draining
UPDATE api.service_replicas SET draining_at = now() WHERE job_id = $1 AND draining_at IS NULL;

-- name: forget_replica
-- A replica whose job ended: the job stays (its logs, its history), the link goes.
DELETE FROM api.service_replicas WHERE job_id = $1;

-- name: services_to_reconcile
-- Each service with when a route last changed it (the controller tries a refused one
-- again at once when it changed).
SELECT name, updated_at FROM api.services ORDER BY name;

-- name: set_blocked_reason
-- Not a change of the service: updated_at stays.
UPDATE api.services SET blocked_reason = $2 WHERE name = $1;

-- name: owner_role
-- The role of a service's owner now ('admin' or 'user'), NULL once they are no user.
SELECT role FROM api.users WHERE name = $1;
