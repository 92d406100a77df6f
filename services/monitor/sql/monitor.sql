-- name: node_state
SELECT state FROM monitor.nodes WHERE id = $1 FOR UPDATE;

-- name: upsert_node
INSERT INTO monitor.nodes AS n (id, hostname, simulated, state, gpu_count, last_heartbeat, address)
VALUES ($1, $2, $3, 'READY', $4, now(), $5)
ON CONFLICT (id) DO UPDATE
SET hostname = EXCLUDED.hostname, simulated = EXCLUDED.simulated, gpu_count = EXCLUDED.gpu_count,
    address = EXCLUDED.address,
    last_heartbeat = now(),
    state = CASE WHEN n.state = 'UNREACHABLE' THEN 'READY' ELSE n.state END,
    state_changed_at = CASE WHEN n.state = 'UNREACHABLE' THEN now() ELSE n.state_changed_at END
RETURNING state;

-- name: gpu_inventory
SELECT index, uuid, model, memory_total_mb FROM monitor.gpus WHERE node_id = $1 ORDER BY index;

-- name: upsert_gpu
INSERT INTO monitor.gpus (node_id, index, uuid, model, memory_total_mb, utilization_pct,
                          memory_used_mb, temperature_c, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now())
ON CONFLICT (node_id, index) DO UPDATE
SET uuid = EXCLUDED.uuid, model = EXCLUDED.model, memory_total_mb = EXCLUDED.memory_total_mb,
    utilization_pct = EXCLUDED.utilization_pct, memory_used_mb = EXCLUDED.memory_used_mb,
    temperature_c = EXCLUDED.temperature_c, updated_at = now();

-- name: delete_gpus_above
DELETE FROM monitor.gpus WHERE node_id = $1 AND index >= $2;

-- name: mark_unreachable
UPDATE monitor.nodes
SET state = 'UNREACHABLE', state_changed_at = now()
WHERE state = 'READY' AND last_heartbeat < now() - make_interval(secs => $1)
RETURNING id, extract(epoch FROM now() - last_heartbeat)::float8 AS age_s;
