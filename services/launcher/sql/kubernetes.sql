-- The Kubernetes runner's own queries (services/launcher/kubernetes/runner.py); it
-- shares the node agent's claim, lease and report queries (agent.sql).

-- name: nodes_to_run
-- The nodes the monitor knows (an exporter runs on each, as a DaemonSet on GPU nodes)
-- whose id matches the runner's pattern.
SELECT id FROM monitor.nodes WHERE id ~ $1 ORDER BY id;

-- name: live_attempts_on_nodes
SELECT a.id, a.job_id, a.node_id, a.state, a.stop_requested_at, a.stop_reason, j.spec
FROM launcher.attempts a JOIN api.jobs j ON j.id = a.job_id
WHERE a.node_id = ANY($1::text[]) AND a.state IN ('ASSIGNED', 'STARTING', 'RUNNING');

-- name: attempt_for_report
-- What reporting an attempt's pod needs: its node (fencing), its job's rules, and where
-- its log goes (the node agent's layout: job, task, attempt number).
SELECT a.node_id, a.job_id, a.generation, a.state, a.stop_reason, a.stop_platform, j.spec,
       a.task_role, a.task_index, a.attempt_no, a.log_path
FROM launcher.attempts a JOIN api.jobs j ON j.id = a.job_id
WHERE a.id = $1;

-- name: job_ssh_keys
-- An MPI job generation's ssh keys, for the Secret its pods mount
-- (services/launcher/kubernetes/mpi.py); the launcher's grant is SELECT.
SELECT user_private_key, user_public_key, host_private_key, host_public_key
FROM launcher.job_ssh_keys
WHERE job_id = $1 AND generation = $2;
