-- Topology for placement: a node's rack (or switch) label, and the NVLink domain of each
-- GPU (GPUs of a node with the same number talk over NVLink; one domain: all of them).
-- Both come from the node's exporter; a multi-node gang is kept in one rack and a
-- multi-GPU task in one NVLink domain when they fit (services/scheduler/placement.py).
ALTER TABLE monitor.nodes ADD COLUMN rack text NOT NULL DEFAULT '';
ALTER TABLE monitor.gpus ADD COLUMN nvlink_domain integer NOT NULL DEFAULT 0;

-- The GPU view the API and /metrics read, with the two new facts at its end.
CREATE OR REPLACE VIEW monitor.gpu_status AS
SELECT g.node_id, g.index, g.uuid, g.model, g.memory_total_mb,
       r.utilization_pct, r.memory_used_mb, r.temperature_c, r.memory_utilization_pct, r.power_w,
       r.sm_clock_mhz, r.throttle_reasons, r.ecc_corrected_volatile, r.ecc_uncorrected_volatile,
       r.remapped_rows_pending, r.remap_failure, r.last_xid,
       coalesce(r.lost, false) AS lost, coalesce(r.unsupported, '{}') AS unsupported,
       coalesce(r.updated_at, g.updated_at) AS updated_at,
       n.hostname, n.simulated, n.state AS node_state, n.drained_at IS NOT NULL AS drained,
       o.job_id, o.task,
       g.nvlink_domain, n.rack
FROM monitor.gpus g
JOIN monitor.nodes n ON n.id = g.node_id
LEFT JOIN monitor.gpu_readings r ON r.node_id = g.node_id AND r.index = g.index
LEFT JOIN LATERAL (
    SELECT a.job_id, a.task_role || '-' || a.task_index AS task
    FROM launcher.attempts a
    WHERE a.node_id = g.node_id AND g.index = ANY(a.gpu_indices)
      AND a.state IN ('ASSIGNED', 'STARTING', 'RUNNING')
    LIMIT 1
) o ON true;
