-- 0035 MPI jobs' ssh keys: per job generation, a key pair the launcher's ssh uses and the
-- workers' sshd admits, and a host key every worker's sshd presents (pinned in the tasks'
-- known_hosts, so no other process on a node can pose as a worker). Made by the launcher
-- with the generation's attempts (services/launcher/job_keys.py); handed only to the nodes
-- that run a task of that generation, by node_claim_attempt; never read by the API.

CREATE TABLE launcher.job_ssh_keys (
    job_id text NOT NULL REFERENCES api.jobs (id) ON DELETE CASCADE,
    generation integer NOT NULL,
    user_private_key text NOT NULL,
    user_public_key text NOT NULL,
    host_private_key text NOT NULL,
    host_public_key text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, generation)
);

GRANT SELECT, INSERT, DELETE ON launcher.job_ssh_keys TO corral_launcher;

-- The claim returns the generation's keys too (NULL for a job that has none), each
-- private key only to the role that uses it: the user key to the launcher (its ssh logs
-- in; the workers start no one), the host key to a worker (its sshd presents it). A node
-- that runs only workers cannot log in to the job's other workers, nor pose as one to a
-- launcher on another node. The result's columns change, so the function is made
-- again, with its grants.
DROP FUNCTION launcher.node_claim_attempt(text, text, text, bigint);

CREATE FUNCTION launcher.node_claim_attempt(p_node text, p_secret text, p_attempt text, p_epoch bigint)
RETURNS TABLE (
    id text, job_id text, generation integer, task_role text, task_index integer, attempt_no integer,
    gpu_indices integer[], spec jsonb, traceparent text, username text, secrets jsonb, peers jsonb,
    ssh_keys jsonb
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    PERFORM launcher.check_node_attempt(p_node, p_attempt);
    RETURN QUERY
    UPDATE launcher.attempts a SET state = 'STARTING'
    FROM api.jobs j
    WHERE a.id = p_attempt AND a.node_id = p_node AND a.state = 'ASSIGNED' AND a.stop_requested_at IS NULL
      AND EXISTS (SELECT FROM launcher.agents g WHERE g.node_id = p_node AND g.epoch = p_epoch
                  AND g.lost_at IS NULL AND g.lease_expires_at > now())
      AND j.id = a.job_id AND j.generation = a.generation AND j.state IN ('SCHEDULED', 'RUNNING')
      AND j.cancel_requested_at IS NULL
    RETURNING a.id, a.job_id, a.generation, a.task_role, a.task_index, a.attempt_no, a.gpu_indices, j.spec,
              j.traceparent, j.username,
              (SELECT coalesce(jsonb_object_agg(s.name, s.value), '{}'::jsonb)
               FROM api.job_secrets s WHERE s.job_id = j.id),
              (SELECT jsonb_agg(jsonb_build_object('task_role', p.task_role, 'task_index', p.task_index,
                                                   'node_id', p.node_id, 'host', p.host, 'ports', p.ports))
               FROM launcher.attempts p WHERE p.job_id = a.job_id AND p.generation = a.generation),
              (SELECT jsonb_build_object(
                          'user_private_key', CASE WHEN a.task_role = 'launcher' THEN k.user_private_key END,
                          'user_public_key', k.user_public_key,
                          'host_private_key', CASE WHEN a.task_role = 'worker' THEN k.host_private_key END,
                          'host_public_key', k.host_public_key)
               FROM launcher.job_ssh_keys k WHERE k.job_id = a.job_id AND k.generation = a.generation);
END
$$;

REVOKE EXECUTE ON FUNCTION launcher.node_claim_attempt(text, text, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION launcher.node_claim_attempt(text, text, text, bigint) TO corral_agent;
