-- name: vcs_waiting_demand
-- GPUs asked for by the PENDING jobs of these VCs, per VC and the GPU type the jobs name
-- (NULL: any type). One job names at most one type (JobSpec), so the first task's that
-- names one is the job's.
SELECT j.virtual_cluster AS vc, t.gpu_type, count(*)::int AS jobs, sum(j.total_gpus)::int AS gpus
FROM api.jobs j
LEFT JOIN LATERAL (
    SELECT upper(task->'resources'->>'gpu_type') AS gpu_type
    FROM jsonb_array_elements(j.spec->'tasks') task
    WHERE task->'resources'->>'gpu_type' IS NOT NULL
    LIMIT 1
) t ON true
WHERE j.state = 'PENDING' AND j.virtual_cluster = ANY ($1::text[])
GROUP BY j.virtual_cluster, t.gpu_type
ORDER BY j.virtual_cluster, t.gpu_type NULLS LAST;

-- name: vcs_users
-- Who holds the GPUs of these VCs now: per VC, user and GPU model (the caller maps models
-- to types, as the cluster slice's list_vcs does), within quota or borrowed.
SELECT j.virtual_cluster AS vc, j.username, m.model, a.borrowed,
       sum(cardinality(a.gpu_indices))::int AS gpus
FROM scheduler.allocations a
JOIN api.jobs j ON j.id = a.job_id
LEFT JOIN LATERAL (SELECT min(g.model) AS model FROM monitor.gpus g WHERE g.node_id = a.node_id) m ON true
WHERE a.released_at IS NULL AND cardinality(a.gpu_indices) > 0 AND j.virtual_cluster = ANY ($1::text[])
GROUP BY j.virtual_cluster, j.username, m.model, a.borrowed
ORDER BY j.virtual_cluster, j.username;
