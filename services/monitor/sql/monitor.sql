-- name: lock_nodes
-- Lock every node a flush touches, in one order, before anything else: two monitors then
-- never wait for each other in a circle. Returns each node's liveness state.
SELECT id, state FROM monitor.nodes WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE;

-- name: register_nodes
-- Many nodes at once (new to this monitor, or their GPUs changed); returns the GPUs each
-- is expected to have.
INSERT INTO monitor.nodes AS n (id, hostname, simulated, state, gpu_count, last_heartbeat, address,
                                 expected_gpus, rack, cpus, memory_mb, gpu_sharing, container_runtime)
SELECT r.id, r.hostname, r.simulated, 'READY', r.gpu_count, now(), r.address, r.gpu_count, r.rack,
       r.cpus, r.memory_mb, r.gpu_sharing, r.container_runtime
FROM unnest($1::text[], $2::text[], $3::bool[], $4::int[], $5::text[], $6::text[], $7::float8[], $8::bigint[],
            $9::text[], $10::text[])
     AS r(id, hostname, simulated, gpu_count, address, rack, cpus, memory_mb, gpu_sharing, container_runtime)
ORDER BY r.id
ON CONFLICT (id) DO UPDATE
SET hostname = EXCLUDED.hostname, simulated = EXCLUDED.simulated, gpu_count = EXCLUDED.gpu_count,
    address = EXCLUDED.address, rack = EXCLUDED.rack, cpus = EXCLUDED.cpus, memory_mb = EXCLUDED.memory_mb,
    gpu_sharing = EXCLUDED.gpu_sharing, container_runtime = EXCLUDED.container_runtime,
    last_heartbeat = now(),
    expected_gpus = greatest(n.expected_gpus, EXCLUDED.gpu_count),
    state = 'READY',
    state_changed_at = CASE WHEN n.state = 'UNREACHABLE' THEN now() ELSE n.state_changed_at END
RETURNING n.id, n.expected_gpus;

-- name: gpu_inventories
-- Each node's rack, CPUs, memory, GPU sharing, container runtime and GPUs as stored (one row
-- with a NULL index for a node without GPUs).
SELECT n.id AS node_id, n.rack, n.cpus, n.memory_mb, n.gpu_sharing, n.container_runtime, g.index, g.uuid, g.model, g.memory_total_mb, g.nvlink_domain
FROM monitor.nodes n LEFT JOIN monitor.gpus g ON g.node_id = n.id
WHERE n.id = ANY($1::text[]) ORDER BY n.id, g.index;

-- name: delete_gpus_beyond
-- GPUs a node no longer reports (it sent fewer than before), and their readings.
WITH gone AS (
    DELETE FROM monitor.gpus g
    USING unnest($1::text[], $2::int[]) AS r(node_id, gpu_count)
    WHERE g.node_id = r.node_id AND g.index >= r.gpu_count
    RETURNING g.node_id, g.index
)
DELETE FROM monitor.gpu_readings x USING gone WHERE x.node_id = gone.node_id AND x.index = gone.index;

-- name: upsert_inventory
INSERT INTO monitor.gpus AS g (node_id, index, uuid, model, memory_total_mb, nvlink_domain, updated_at)
SELECT r.node_id, r.index, r.uuid, r.model, r.memory_total_mb, r.nvlink_domain, now()
FROM unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::int[], $6::int[])
     AS r(node_id, index, uuid, model, memory_total_mb, nvlink_domain)
ON CONFLICT (node_id, index) DO UPDATE
SET uuid = EXCLUDED.uuid, model = EXCLUDED.model, memory_total_mb = EXCLUDED.memory_total_mb,
    nvlink_domain = EXCLUDED.nvlink_domain, updated_at = now();

-- name: upsert_readings
-- One row per GPU, all of a batch at once (arrays in GPU order).
INSERT INTO monitor.gpu_readings AS g (node_id, index, utilization_pct, memory_used_mb, temperature_c,
                                       memory_utilization_pct, power_w, sm_clock_mhz, throttle_reasons,
                                       ecc_corrected_volatile, ecc_uncorrected_volatile,
                                       remapped_rows_pending, remap_failure, last_xid, xid_count, lost,
                                       unsupported, updated_at)
SELECT r.node_id, r.index, r.utilization_pct, r.memory_used_mb, r.temperature_c, r.memory_utilization_pct,
       r.power_w, r.sm_clock_mhz,
       CASE WHEN r.throttle_reasons IS NULL THEN NULL
            ELSE coalesce(string_to_array(nullif(r.throttle_reasons, ''), ','), '{}') END,
       r.ecc_corrected, r.ecc_uncorrected, r.remapped_rows_pending, r.remap_failure, r.last_xid,
       r.xid_count, r.lost, coalesce(string_to_array(nullif(r.unsupported, ''), ','), '{}'), now()
FROM unnest($1::text[], $2::int[], $3::real[], $4::int[], $5::real[], $6::real[], $7::float8[], $8::int[],
            $9::text[], $10::bigint[], $11::bigint[], $12::bool[], $13::bool[], $14::int[], $15::int[],
            $16::bool[], $17::text[])
     AS r(node_id, index, utilization_pct, memory_used_mb, temperature_c, memory_utilization_pct, power_w,
          sm_clock_mhz, throttle_reasons, ecc_corrected, ecc_uncorrected, remapped_rows_pending,
          remap_failure, last_xid, xid_count, lost, unsupported)
ON CONFLICT (node_id, index) DO UPDATE
SET utilization_pct = EXCLUDED.utilization_pct, memory_used_mb = EXCLUDED.memory_used_mb,
    temperature_c = EXCLUDED.temperature_c, memory_utilization_pct = EXCLUDED.memory_utilization_pct,
    power_w = EXCLUDED.power_w, sm_clock_mhz = EXCLUDED.sm_clock_mhz,
    throttle_reasons = EXCLUDED.throttle_reasons,
    ecc_corrected_volatile = EXCLUDED.ecc_corrected_volatile,
    ecc_uncorrected_volatile = EXCLUDED.ecc_uncorrected_volatile,
    remapped_rows_pending = EXCLUDED.remapped_rows_pending, remap_failure = EXCLUDED.remap_failure,
    last_xid = EXCLUDED.last_xid, xid_count = EXCLUDED.xid_count, lost = EXCLUDED.lost,
    unsupported = EXCLUDED.unsupported, updated_at = now();

-- name: touch_nodes
-- Liveness for many nodes in one statement; returns the ones that were UNREACHABLE (back now).
-- (NO KEY UPDATE locks, here and below: they do not wait for the key-share locks that the
-- readings write takes on nodes through monitor.gpus' foreign key.)
WITH previous AS (
    SELECT id, state FROM monitor.nodes WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE
)
UPDATE monitor.nodes n
SET last_heartbeat = now(),
    state = 'READY',
    state_changed_at = CASE WHEN previous.state = 'UNREACHABLE' THEN now() ELSE n.state_changed_at END
FROM previous
WHERE n.id = previous.id
RETURNING n.id, previous.state AS previous_state;

-- name: mark_unreachable
UPDATE monitor.nodes
SET state = 'UNREACHABLE', state_changed_at = now()
WHERE state = 'READY' AND last_heartbeat < now() - make_interval(secs => $1)
RETURNING id, extract(epoch FROM now() - last_heartbeat)::float8 AS age_s;

-- name: node_health
SELECT drained_at IS NOT NULL AS drained, drain_evicts, health_marks, health_waivers, expected_gpus
FROM monitor.nodes WHERE id = $1 FOR NO KEY UPDATE;

-- name: save_health_marks
UPDATE monitor.nodes SET health_marks = $2 WHERE id = $1;

-- name: drain_node
UPDATE monitor.nodes
SET drained_at = coalesce(drained_at, now()),
    drain_reason = CASE WHEN drained_at IS NULL THEN $2 ELSE drain_reason END,
    drained_by = CASE WHEN drained_at IS NULL THEN $3 ELSE drained_by END,
    drain_evicts = drain_evicts OR $4
WHERE id = $1 AND (drained_at IS NULL OR (NOT drain_evicts AND $4))
RETURNING drain_reason;

-- name: undrain_node
UPDATE monitor.nodes
SET drained_at = NULL, drain_reason = NULL, drained_by = NULL, drain_evicts = false,
    health_waivers = $2, expected_gpus = $3
WHERE id = $1 AND drained_at IS NOT NULL
RETURNING id;

-- name: node_exists
SELECT gpu_count FROM monitor.nodes WHERE id = $1;

-- name: current_gpus
SELECT g.index, g.uuid, g.model, g.memory_total_mb, coalesce(r.lost, false) AS lost, r.remap_failure
FROM monitor.gpus g LEFT JOIN monitor.gpu_readings r USING (node_id, index)
WHERE g.node_id = $1 ORDER BY g.index;

-- name: insert_health_event
INSERT INTO monitor.health_events (node_id, kind, gpu_index, condition, action, detail, actor)
VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: gpu_owners
-- GPU -> job attribution: the live attempts and the GPUs they hold.
SELECT node_id, gpu, job_id, task_role || '-' || task_index AS task
FROM launcher.attempts, unnest(gpu_indices) AS gpu
WHERE state IN ('ASSIGNED', 'STARTING', 'RUNNING');

-- name: upsert_history
-- Merge buckets: two monitor instances may each hold part of one GPU's bucket.
INSERT INTO monitor.gpu_history AS h (resolution_s, bucket, node_id, gpu_index, job_id, samples,
                                      utilization_avg, utilization_max, memory_used_mb_max,
                                      temperature_max, power_avg)
SELECT $1, r.bucket, r.node_id, r.gpu_index, r.job_id, r.samples, r.utilization_avg, r.utilization_max,
       r.memory_used_mb_max, r.temperature_max, r.power_avg
FROM unnest($2::timestamptz[], $3::text[], $4::int[], $5::text[], $6::int[], $7::float8[], $8::real[],
            $9::int[], $10::real[], $11::real[])
     AS r(bucket, node_id, gpu_index, job_id, samples, utilization_avg, utilization_max,
          memory_used_mb_max, temperature_max, power_avg)
ON CONFLICT (resolution_s, node_id, gpu_index, bucket) DO UPDATE
SET samples = h.samples + EXCLUDED.samples,
    job_id = coalesce(EXCLUDED.job_id, h.job_id),
    utilization_avg = (h.utilization_avg * h.samples + EXCLUDED.utilization_avg * EXCLUDED.samples)
                      / nullif(h.samples + EXCLUDED.samples, 0),
    utilization_max = greatest(h.utilization_max, EXCLUDED.utilization_max),
    memory_used_mb_max = greatest(h.memory_used_mb_max, EXCLUDED.memory_used_mb_max),
    temperature_max = greatest(h.temperature_max, EXCLUDED.temperature_max),
    power_avg = (h.power_avg * h.samples + EXCLUDED.power_avg * EXCLUDED.samples)
                / nullif(h.samples + EXCLUDED.samples, 0);

-- name: roll_up_history
-- Fine buckets -> coarse buckets, for coarse buckets that have ended; idempotent (recomputed whole).
INSERT INTO monitor.gpu_history AS h (resolution_s, bucket, node_id, gpu_index, job_id, samples,
                                      utilization_avg, utilization_max, memory_used_mb_max,
                                      temperature_max, power_avg)
SELECT $2::int, date_bin(make_interval(secs => $2::int), bucket, 'epoch'::timestamptz), node_id, gpu_index,
       max(job_id), sum(samples),
       sum(utilization_avg * samples) / nullif(sum(samples), 0), max(utilization_max),
       max(memory_used_mb_max), max(temperature_max),
       sum(power_avg * samples) / nullif(sum(samples), 0)
FROM monitor.gpu_history
WHERE resolution_s = $1::int
  AND bucket >= date_bin(make_interval(secs => $2::int), now(), 'epoch'::timestamptz) - make_interval(secs => $2::int * 3)
  AND bucket < date_bin(make_interval(secs => $2::int), now(), 'epoch'::timestamptz)
GROUP BY 2, node_id, gpu_index
ON CONFLICT (resolution_s, node_id, gpu_index, bucket) DO UPDATE
SET samples = EXCLUDED.samples, job_id = EXCLUDED.job_id, utilization_avg = EXCLUDED.utilization_avg,
    utilization_max = EXCLUDED.utilization_max, memory_used_mb_max = EXCLUDED.memory_used_mb_max,
    temperature_max = EXCLUDED.temperature_max, power_avg = EXCLUDED.power_avg;

-- name: roll_up_job_usage
-- Coarse buckets ($1 s) that roll_up_history no longer recomputes (starting before the
-- last three) and that have not been folded yet -> one row per (UTC day, job) with the
-- readings' count and utilisation sum; then the mark moves past them. The mark's row lock
-- makes two upkeeps fold one after the other, never the same bucket twice.
WITH mark AS (
    SELECT folded_until FROM monitor.job_gpu_usage_mark FOR UPDATE
), edge AS (
    SELECT date_bin(make_interval(secs => $1::int), now(), 'epoch'::timestamptz)
           - make_interval(secs => $1::int * 3) AS final_before
), folded AS (
    INSERT INTO monitor.job_gpu_usage_daily AS d (day, job_id, samples, utilization_sum)
    SELECT (h.bucket AT TIME ZONE 'UTC')::date, h.job_id, sum(h.samples), sum(h.utilization_avg * h.samples)
    FROM monitor.gpu_history h, mark, edge
    WHERE h.resolution_s = $1::int AND h.job_id IS NOT NULL AND h.utilization_avg IS NOT NULL
      AND h.bucket >= mark.folded_until AND h.bucket < edge.final_before
    GROUP BY 1, 2
    ON CONFLICT (day, job_id) DO UPDATE
    SET samples = d.samples + EXCLUDED.samples, utilization_sum = d.utilization_sum + EXCLUDED.utilization_sum
    RETURNING 1
)
UPDATE monitor.job_gpu_usage_mark m
SET folded_until = greatest(m.folded_until, edge.final_before)
FROM edge, (SELECT count(*) FROM folded) AS done;

-- name: prune_job_usage
DELETE FROM monitor.job_gpu_usage_daily
WHERE day < ((now() - make_interval(secs => $1)) AT TIME ZONE 'UTC')::date;

-- name: prune_history
DELETE FROM monitor.gpu_history WHERE resolution_s = $1 AND bucket < now() - make_interval(secs => $2);

-- name: latest_gpus
-- Everything /metrics shows: each GPU's latest readings, its node, and who uses it.
SELECT * FROM monitor.gpu_status ORDER BY node_id, index;
