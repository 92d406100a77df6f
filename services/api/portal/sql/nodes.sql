-- name: nodes_heatmap_gpus
-- Every GPU (or one node's) with its latest reading, whether that reading is fresh, and
-- the job holding it: a live attempt's, else a scheduler allocation not yet started. One
-- pass over each table joined by key, not a subquery per GPU: it runs on every refresh
-- of the nodes page, for thousands of GPUs. A job's owner is looked up per holder, by
-- key, so the size of api.jobs (every job ever) does not matter. $2: seconds after which
-- a reading is stale. The columns are in HeatmapGpuRow's order (it is built from them).
SELECT g.node_id, g.index AS gpu_index, g.model, g.memory_total_mb,
       r.memory_used_mb, r.utilization_pct, r.temperature_c, r.last_xid, coalesce(r.lost, false) AS lost,
       r.remap_failure, r.ecc_uncorrected_volatile,
       r.updated_at AS read_at,
       (r.updated_at IS NOT NULL AND r.updated_at < now() - make_interval(secs => $2)) AS stale,
       coalesce(o.job_id, al.job_id) AS job_id,
       coalesce(o.task, al.task) AS task,
       coalesce(o.owner, al.owner) AS job_owner
FROM monitor.gpus g
LEFT JOIN monitor.gpu_readings r ON r.node_id = g.node_id AND r.index = g.index
LEFT JOIN (
    SELECT DISTINCT ON (a.node_id, held.index) a.node_id, held.index, a.job_id,
           a.task_role || '-' || a.task_index AS task,
           (SELECT j.username FROM api.jobs j WHERE j.id = a.job_id) AS owner
    FROM launcher.attempts a, unnest(a.gpu_indices) AS held(index)
    WHERE a.state IN ('ASSIGNED', 'STARTING', 'RUNNING') AND ($1::text IS NULL OR a.node_id = $1)
    ORDER BY a.node_id, held.index, a.created_at DESC
) o ON o.node_id = g.node_id AND o.index = g.index
LEFT JOIN (
    SELECT DISTINCT ON (s.node_id, held.index) s.node_id, held.index, s.job_id,
           s.task_role || '-' || s.task_index AS task,
           (SELECT j.username FROM api.jobs j WHERE j.id = s.job_id) AS owner
    FROM scheduler.allocations s, unnest(s.gpu_indices) AS held(index)
    WHERE s.released_at IS NULL AND ($1::text IS NULL OR s.node_id = $1)
    ORDER BY s.node_id, held.index, s.created_at DESC
) al ON al.node_id = g.node_id AND al.index = g.index
WHERE $1::text IS NULL OR g.node_id = $1
ORDER BY g.node_id, g.index;

-- name: nodes_live_tasks
-- The tasks running on one node (attempts not yet ended), with their jobs' owners and
-- names, newest first.
SELECT a.job_id, a.task_role || '-' || a.task_index AS task, a.gpu_indices, a.state, a.attempt_no,
       a.started_at, a.created_at, j.username, j.name AS job_name
FROM launcher.attempts a
JOIN api.jobs j ON j.id = a.job_id
WHERE a.node_id = $1 AND a.state IN ('ASSIGNED', 'STARTING', 'RUNNING')
ORDER BY a.created_at DESC, a.id;
