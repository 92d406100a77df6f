-- name: release_finished_allocations
-- Reconcile: allocations of jobs that ended, or went back to PENDING for a retry (the
-- launcher decides that only once every task of the generation has stopped), free their GPUs.
UPDATE scheduler.allocations a SET released_at = now()
FROM api.jobs j
WHERE a.job_id = j.id AND a.released_at IS NULL
  AND (j.state IN ('PENDING', 'SUCCEEDED', 'FAILED', 'CANCELLED') OR j.generation <> a.generation);

-- name: ready_nodes
-- Ready: the monitor hears the node and has not drained it, and a node agent holds a live
-- lease to run tasks there. A GPU NVML reports lost is no capacity. A node's GPUs are of
-- one model (its type is derived from the model in Python: shared/gpu_types.py). It runs
-- task images when it has a container runtime, or when Kubernetes runs it (a pod always runs
-- its image).
SELECT n.id, n.rack, n.cpus, n.memory_mb, n.gpu_sharing, array_agg(g.index ORDER BY g.index) AS gpu_indices,
       array_agg(g.nvlink_domain ORDER BY g.index) AS gpu_domains, min(g.model) AS model,
       n.container_runtime <> '' OR bool_or(a.isolation = 'pod') AS runs_images
FROM monitor.nodes n
JOIN launcher.agents a ON a.node_id = n.id AND a.lost_at IS NULL AND a.lease_expires_at > now()
LEFT JOIN monitor.gpus g
    ON g.node_id = n.id
   AND NOT EXISTS (SELECT 1 FROM monitor.gpu_readings r WHERE r.node_id = g.node_id AND r.index = g.index AND r.lost)
WHERE n.state = 'READY' AND n.drained_at IS NULL
GROUP BY n.id, n.rack, n.cpus, n.memory_mb, n.gpu_sharing, n.container_runtime;

-- name: node_models
-- The GPU model of every node holding allocations (ready or not), to type running jobs.
SELECT node_id, min(model) AS model FROM monitor.gpus WHERE node_id = ANY($1::text[]) GROUP BY node_id;

-- name: virtual_clusters
SELECT name, quota, max_gpus_per_user FROM api.virtual_clusters;

-- name: jobs_on_evicting_nodes
-- Jobs holding GPUs on a node drained with eviction (its GPUs are gone or failing).
SELECT DISTINCT a.job_id, n.id AS node_id, n.drain_reason
FROM scheduler.allocations a
JOIN monitor.nodes n ON n.id = a.node_id
WHERE a.released_at IS NULL AND n.drained_at IS NOT NULL AND n.drain_evicts
ORDER BY a.job_id;

-- name: live_allocations
-- Every placed job's GPUs, with what the policy weighs when choosing victims: owner,
-- priority, borrowed or not, promoted or not, how long since it was placed, its limit, whether a
-- preemption was already asked for this generation; and what each task asked for (CPUs,
-- memory, the job's one GPU type), which placement weighs stranding against.
SELECT a.job_id, a.node_id, a.gpu_indices, a.gpu_milli, a.borrowed, a.promoted,
       (SELECT (t->'resources'->>'cpus')::float8 FROM jsonb_array_elements(j.spec->'tasks') AS r(t)
        WHERE t->>'name' = a.task_role) AS cpus,
       (SELECT (t->'resources'->>'memory_mb')::bigint FROM jsonb_array_elements(j.spec->'tasks') AS r(t)
        WHERE t->>'name' = a.task_role) AS memory_mb,
       (SELECT upper(t->'resources'->>'gpu_type') FROM jsonb_array_elements(j.spec->'tasks') AS r(t)
        WHERE t->'resources'->>'gpu_type' IS NOT NULL LIMIT 1) AS gpu_type_asked,
       j.virtual_cluster, j.username, j.priority, j.spec->>'kind' = 'service' AS service,
       extract(epoch FROM now() - a.created_at)::float8 AS runtime_s,
       (j.spec->>'max_runtime_s')::float8 AS max_runtime_s,
       EXISTS (SELECT 1 FROM scheduler.preemptions p WHERE p.job_id = a.job_id AND p.generation = a.generation)
           AS preempting,
       -- Least attained service: GPU-seconds of every attempt of the job, this run's too;
       -- and how long after its submit this placement came (its waits and earlier runs).
       (SELECT coalesce(sum(cardinality(x.gpu_indices)
                            * extract(epoch FROM coalesce(x.finished_at, now()) - x.started_at)), 0)
        FROM launcher.attempts x WHERE x.job_id = a.job_id AND x.started_at IS NOT NULL)::float8
           AS attained_gpu_s,
       extract(epoch FROM a.created_at - j.created_at)::float8 AS placed_after_s
FROM scheduler.allocations a JOIN api.jobs j ON j.id = a.job_id
WHERE a.released_at IS NULL
ORDER BY a.job_id, a.task_role, a.task_index;

-- name: pending_queue
-- The pending jobs, oldest first: what changes between cycles (version, waits, attained
-- service). What they ask for never changes; pending_demands reads it once per job.
SELECT id, version, generation,
       -- A job never placed (generation 0) has no attempts: no look-up for most of a queue.
       CASE WHEN generation = 0 THEN 0 ELSE
       (SELECT coalesce(sum(cardinality(x.gpu_indices)
                            * extract(epoch FROM coalesce(x.finished_at, now()) - x.started_at)), 0)
        FROM launcher.attempts x WHERE x.job_id = api.jobs.id AND x.started_at IS NOT NULL) END::float8
           AS attained_gpu_s,
       extract(epoch FROM now() - created_at)::float8 AS age_s
FROM api.jobs
WHERE state = 'PENDING' AND (not_before IS NULL OR not_before <= now())
ORDER BY created_at, id LIMIT $1;

-- name: pending_demands
-- Only what placement needs: per role, its name, instances, and GPUs, CPUs and memory per
-- instance; the job's one GPU type (upper case), topology and limit; whether it must run on a
-- node that runs images (a task names one, and the job does not allow host execution).
SELECT id, priority, virtual_cluster, username,
       (SELECT array_agg(ARRAY[t->>'name', t->>'instances', t->'resources'->>'gpus',
                               coalesce(t->'resources'->>'cpus', '0'),
                               coalesce(t->'resources'->>'memory_mb', '0')] ORDER BY n)
        FROM jsonb_array_elements(spec->'tasks') WITH ORDINALITY AS r(t, n)) AS tasks,
       (SELECT upper(t->'resources'->>'gpu_type') FROM jsonb_array_elements(spec->'tasks') AS r(t)
        WHERE t->'resources'->>'gpu_type' IS NOT NULL LIMIT 1) AS gpu_type,
       coalesce(spec->>'topology', 'pack') AS topology,
       (spec->>'max_runtime_s')::float8 AS max_runtime_s, traceparent,
       spec->>'kind' = 'service' AS service,
       NOT coalesce((spec->>'allow_host_execution')::bool, false)
           AND jsonb_path_exists(spec, '$.tasks[*].image ? (@ != null)') AS needs_image_runtime
FROM api.jobs
WHERE id = ANY($1::text[]);

-- name: commit_placements
-- Every placement of a cycle, in one statement (one round trip, where a placement took
-- three): each job still PENDING at the version the cycle read ($1, $2) becomes SCHEDULED
-- as generation $3, with its allocations ($4..$11 and $20, one element per task instance;
-- GPU indices as '{0,1}', $20 the share of its one GPU in thousandths, 0 for whole GPUs) and
-- its job.scheduled ($12..$17, an outbox row's columns, in
-- decision order). A job that changed since the read (e.g. cancelled) is skipped, and so
-- are its allocations and its event. The events of $18 (their ids) NOTIFY the relays on
-- channel $19 (the others the scheduler publishes itself on commit). Returns the jobs
-- scheduled.
WITH decided AS (
    SELECT * FROM unnest($1::text[], $2::int[], $3::int[]) AS d(job_id, version, generation)),
scheduled AS (
    UPDATE api.jobs j
    SET state = 'SCHEDULED', version = j.version + 1, generation = d.generation, updated_at = now()
    FROM decided d
    WHERE j.id = d.job_id AND j.state = 'PENDING' AND j.version = d.version
      AND j.generation = d.generation - 1
    RETURNING j.id),
allocated AS (
    INSERT INTO scheduler.allocations
        (job_id, generation, task_role, task_index, node_id, gpu_indices, borrowed, promoted, gpu_milli)
    SELECT a.job_id, a.generation, a.task_role, a.task_index, a.node_id, a.gpu_indices::int[],
           a.borrowed, a.promoted, a.gpu_milli
    FROM unnest($4::text[], $5::int[], $6::text[], $7::int[], $8::text[], $9::text[], $10::bool[],
                $11::bool[], $20::int[])
        AS a(job_id, generation, task_role, task_index, node_id, gpu_indices, borrowed, promoted, gpu_milli)
    WHERE a.job_id IN (SELECT id FROM scheduled)),
event AS (
    INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
    SELECT e.event_id, e.subject, e.aggregate, e.part, e.payload, e.headers::jsonb
    FROM unnest($12::text[], $13::text[], $14::text[], $15::smallint[], $16::bytea[], $17::text[])
        WITH ORDINALITY AS e(event_id, subject, aggregate, part, payload, headers, n)
    WHERE e.aggregate IN (SELECT id FROM scheduled)
    ORDER BY e.n
    RETURNING event_id, part)
SELECT s.id,
       (SELECT count(pg_notify($19, part::text)) FROM event WHERE event_id = ANY($18::text[])) AS notified
FROM scheduled s;

-- name: insert_preemption
-- One decision per job generation; only a placed job can be preempted.
INSERT INTO scheduler.preemptions (job_id, generation, reason)
SELECT id, generation, $2 FROM api.jobs WHERE id = $1 AND state IN ('SCHEDULED', 'RUNNING')
ON CONFLICT DO NOTHING
RETURNING generation;

-- name: largest_unready_node
-- The most GPUs on a registered node that is not ready (drained, unreachable, no agent).
SELECT coalesce(max(gpu_count), 0) FROM monitor.nodes WHERE id <> ALL($1::text[]);

-- name: write_pending_status
-- One batch per cycle; ``since`` moves only when the reason changes.
-- The estimate comes as seconds from now (NULL: none).
INSERT INTO scheduler.pending_status AS s (job_id, reason, detail, estimated_start)
SELECT job_id, reason, detail, now() + make_interval(secs => start_in_s)
FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[]) AS u(job_id, reason, detail, start_in_s)
ON CONFLICT (job_id) DO UPDATE
SET reason = excluded.reason, detail = excluded.detail, estimated_start = excluded.estimated_start,
    since = CASE WHEN s.reason = excluded.reason THEN s.since ELSE now() END, updated_at = now();

-- name: write_queue_order
-- The waiting jobs' ids in the cycle's order (positions: 0019_queue_order.sql).
INSERT INTO scheduler.queue_order (job_ids) VALUES ($1::text[])
ON CONFLICT (only_row) DO UPDATE SET job_ids = excluded.job_ids, updated_at = now();

-- name: forget_pending_status
-- Jobs that are no longer pending (placed, cancelled) or were not considered this cycle.
-- An anti-join (a hash of the waiting ids), not "<> ALL($1)", which compares every row
-- with every id: with a few hundred jobs waiting that would be a quarter of Postgres' time.
DELETE FROM scheduler.pending_status s
WHERE NOT EXISTS (SELECT 1 FROM unnest($1::text[]) AS w(job_id) WHERE w.job_id = s.job_id);

-- name: forget_pending_status_of
-- The jobs that waited at the last cycle and no longer do.
DELETE FROM scheduler.pending_status WHERE job_id = ANY ($1::text[]);

-- name: finished_waits
-- The jobs that finished after $1 (epoch seconds), in the order they finished, with their
-- queueing delay: age at the end less the time its runs took (attained GPU-seconds over
-- its GPUs, as for a pending job's waits): the load measure of the starvation limit
-- (starvation.py). GPU-less jobs have no run time to take away and are left out.
SELECT extract(epoch FROM j.finished_at)::float8 AS finished_s,
       greatest(0, extract(epoch FROM j.finished_at - j.created_at)
                   - (SELECT coalesce(sum(cardinality(x.gpu_indices)
                                          * extract(epoch FROM coalesce(x.finished_at, j.finished_at)
                                                               - x.started_at)), 0)
                      FROM launcher.attempts x WHERE x.job_id = j.id AND x.started_at IS NOT NULL)
                     / j.total_gpus)::float8 AS waited_s
FROM api.jobs j
WHERE j.finished_at > to_timestamp($1) AND j.state IN ('SUCCEEDED', 'FAILED') AND j.total_gpus > 0
ORDER BY j.finished_at, j.id;
