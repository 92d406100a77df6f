-- name: serving_table
-- Everything the gateway needs, in one statement (services/api/serving/endpoints.py):
-- each service with each of its replicas, the replica job's state, its live attempt (if
-- any) with readiness, host and the allocated port of the replica's own service port
-- label (a replica of an older revision keeps the label it was made with). A service
-- without replicas comes once, with NULL replica columns.
SELECT s.name, s.owner, s.public, s.replicas, s.deleting_at IS NOT NULL AS deleting,
       r.job_id, r.draining_at IS NOT NULL AS draining, j.state AS job_state,
       a.id AS attempt_id, a.state AS attempt_state, a.ready, a.ready_detail, a.host,
       (a.ports -> (j.spec -> 'service' ->> 'port') ->> 0)::integer AS port
FROM api.services s
LEFT JOIN api.service_replicas r ON r.service = s.name
LEFT JOIN api.jobs j ON j.id = r.job_id
LEFT JOIN LATERAL (
    SELECT la.id, la.state, la.ready, la.ready_detail, la.host, la.ports
    FROM launcher.attempts la
    WHERE la.job_id = r.job_id AND la.state IN ('ASSIGNED', 'STARTING', 'RUNNING')
    ORDER BY la.generation DESC, la.attempt_no DESC
    LIMIT 1
) a ON true
ORDER BY s.name, r.created_at, r.job_id;
