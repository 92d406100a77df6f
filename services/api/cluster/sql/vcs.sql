-- name: list_vcs
-- Each VC with what it uses now: GPUs held per GPU model (the caller maps models to
-- types), guaranteed or borrowed, and its jobs waiting and placed. $2: the user asking,
-- who sees only the VCs open to them (NULL: an admin, who sees every VC).
SELECT v.name, v.description, v.quota, v.max_gpus_per_user, v.allowed_groups, v.interactive, v.created_at,
       v.updated_at, v.updated_by,
       (SELECT count(*) FROM api.jobs j WHERE j.virtual_cluster = v.name AND j.state = 'PENDING')
           AS pending_jobs,
       (SELECT count(*) FROM api.jobs j WHERE j.virtual_cluster = v.name AND j.state IN ('SCHEDULED', 'RUNNING'))
           AS running_jobs,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('model', u.model, 'borrowed', u.borrowed, 'gpus', u.gpus)), '[]')
        FROM (SELECT m.model, a.borrowed, sum(cardinality(a.gpu_indices)) AS gpus
              FROM scheduler.allocations a
              JOIN api.jobs j ON j.id = a.job_id
              LEFT JOIN LATERAL (SELECT min(g.model) AS model FROM monitor.gpus g WHERE g.node_id = a.node_id) m ON true
              WHERE a.released_at IS NULL AND j.virtual_cluster = v.name AND cardinality(a.gpu_indices) > 0
              GROUP BY m.model, a.borrowed) u) AS usage
FROM api.virtual_clusters v
WHERE ($1::text IS NULL OR v.name = $1)
  AND ($2::text IS NULL OR v.allowed_groups IS NULL
       OR EXISTS (SELECT 1 FROM api.group_members m WHERE m.username = $2 AND m.group_name = ANY (v.allowed_groups)))
ORDER BY v.name;

-- name: upsert_vc
-- Returns whether the row is new (xmax = 0 only for an inserted row). The access list
-- ($6) is written only when $7 says it was given: a resize leaves it as it was; so is the
-- interactive switch ($8 NULL: left as it is, on for a new VC).
INSERT INTO api.virtual_clusters (name, description, quota, max_gpus_per_user, updated_by, allowed_groups,
                                  interactive)
VALUES ($1, $2, $3, $4, $5, $6, coalesce($8::boolean, true))
ON CONFLICT (name) DO UPDATE
SET description = excluded.description, quota = excluded.quota,
    max_gpus_per_user = excluded.max_gpus_per_user, updated_by = excluded.updated_by, updated_at = now(),
    allowed_groups = CASE WHEN $7::boolean THEN excluded.allowed_groups ELSE virtual_clusters.allowed_groups END,
    interactive = coalesce($8::boolean, virtual_clusters.interactive)
RETURNING (xmax = 0) AS created;

-- name: lock_vc
SELECT name FROM api.virtual_clusters WHERE name = $1 FOR UPDATE;

-- name: vc_live_jobs
SELECT count(*) FROM api.jobs WHERE virtual_cluster = $1 AND state IN ('PENDING', 'SCHEDULED', 'RUNNING');

-- name: delete_vc
DELETE FROM api.virtual_clusters WHERE name = $1;

-- name: quota_totals
-- Guaranteed GPUs promised per GPU type across every VC but the one being changed.
SELECT q.key AS gpu_type, sum(q.value::int) AS gpus
FROM api.virtual_clusters v, jsonb_each_text(v.quota) q
WHERE v.name <> $1
GROUP BY q.key;

-- name: cluster_shape
-- Every registered node (ready or not) with its GPU count and model: what any job could
-- ever get: the quota warnings (quota.py) compare quotas with it.
SELECT n.id, greatest(n.gpu_count, n.expected_gpus) AS gpus, min(g.model) AS model, n.cpus, n.memory_mb
FROM monitor.nodes n LEFT JOIN monitor.gpus g ON g.node_id = n.id
GROUP BY n.id;

-- name: lock_groups
-- The groups of a VC access list that exist, held FOR SHARE so none is deleted while the
-- list naming it is written.
SELECT name FROM api.groups WHERE name = ANY ($1::text[]) FOR SHARE;
