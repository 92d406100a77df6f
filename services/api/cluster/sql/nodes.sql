-- name: list_nodes
SELECT n.id, n.hostname, n.simulated, n.state, n.gpu_count, n.expected_gpus, n.last_heartbeat,
       n.drained_at, n.drain_reason, n.drained_by, n.drain_evicts, n.rack,
       (SELECT count(*) FROM monitor.gpu_readings r WHERE r.node_id = n.id AND r.lost) AS lost_gpus,
       (SELECT coalesce(sum(cardinality(a.gpu_indices)), 0) FROM launcher.attempts a
        WHERE a.node_id = n.id AND a.state IN ('ASSIGNED', 'STARTING', 'RUNNING')) AS gpus_in_use,
       coalesce(g.isolation, 'unknown') AS isolation, coalesce(g.isolation_detail, '') AS isolation_detail,
       CASE WHEN g.machine_cpus > 0 AND n.cpus > g.machine_cpus
            THEN format('advertises %s CPUs on a machine of %s cores: its tasks share cores',
                        n.cpus, g.machine_cpus)
            WHEN g.machine_cpus > 0 AND n.cpus = 0
            THEN format('advertises no CPU limit on a machine of %s cores: past %s one-CPU tasks, '
                        'they share cores', g.machine_cpus, g.machine_cpus) END AS cpu_sharing
FROM monitor.nodes n
LEFT JOIN launcher.agents g ON g.node_id = n.id
WHERE $1::text IS NULL OR n.id = $1
ORDER BY n.id;

-- name: list_gpus
-- Every GPU's latest readings and who uses it.
SELECT node_id, index, uuid, model, memory_total_mb, memory_used_mb, utilization_pct, memory_utilization_pct,
       temperature_c, power_w, sm_clock_mhz, throttle_reasons, ecc_corrected_volatile,
       ecc_uncorrected_volatile, remapped_rows_pending, remap_failure, last_xid, lost, unsupported, job_id,
       task, updated_at, nvlink_domain
FROM monitor.gpu_status WHERE $1::text IS NULL OR node_id = $1 ORDER BY node_id, index;

-- name: health_events
SELECT at, kind, gpu_index, condition, action, detail, actor
FROM monitor.health_events WHERE node_id = $1 ORDER BY at DESC, id DESC LIMIT $2;

-- name: gpu_history
SELECT bucket, node_id, gpu_index, job_id, samples, utilization_avg, utilization_max,
       memory_used_mb_max, temperature_max, power_avg
FROM monitor.gpu_history
WHERE resolution_s = $1 AND bucket >= now() - make_interval(secs => $2)
  AND ($3::text IS NULL OR node_id = $3)
  AND ($4::int IS NULL OR gpu_index = $4)
  AND ($5::text IS NULL OR job_id = $5)
ORDER BY node_id, gpu_index, bucket
LIMIT 100000;

-- name: list_service_instances
SELECT instance_id, service, hostname, pid, started_at, last_seen_at,
       extract(epoch FROM now() - last_seen_at)::float8 AS silent_s
FROM corral.service_instances
ORDER BY service, started_at;

-- name: job_owner
-- Whose job it is, for a per-job GPU history (someone else's job is not found).
SELECT username FROM api.jobs WHERE id = $1;
