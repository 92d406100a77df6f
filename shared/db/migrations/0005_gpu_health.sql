-- 0005 GPU health: full readings, drained nodes, health findings, downsampled history.
--
-- All monitor-owned (DESIGN.md §1). A node's liveness (`state`: READY / UNREACHABLE) and
-- its drain are separate facts: a drained node may still be alive and running work, and
-- an unreachable node stays drained when it returns. The scheduler places nothing on a
-- drained node; when the drain `evicts`, it also preempts what runs there.

-- monitor.gpus keeps the inventory (what registration says, rarely written); the latest
-- readings move to a table of their own, rewritten every readings interval for every GPU
-- of the cluster. UNLOGGED: no WAL for that churn; after a Postgres crash the table is
-- empty until the next write, seconds later (its contents are a cache of heartbeats).
ALTER TABLE monitor.gpus
    DROP COLUMN utilization_pct,
    DROP COLUMN memory_used_mb,
    DROP COLUMN temperature_c;

CREATE UNLOGGED TABLE monitor.gpu_readings (
    node_id text NOT NULL,
    index integer NOT NULL,
    utilization_pct real,
    memory_utilization_pct real,
    memory_used_mb integer,
    temperature_c real,
    power_w real,
    sm_clock_mhz integer,
    throttle_reasons text[],
    ecc_corrected_volatile bigint,
    ecc_uncorrected_volatile bigint,
    remapped_rows_pending boolean,
    remap_failure boolean,
    last_xid integer,
    xid_count integer NOT NULL DEFAULT 0,
    lost boolean NOT NULL DEFAULT false,
    unsupported text[] NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, index)
) WITH (fillfactor = 50);  -- room on each page, so the rewrites stay HOT updates

ALTER TABLE monitor.nodes
    ADD COLUMN drained_at timestamptz,
    ADD COLUMN drain_reason text,
    ADD COLUMN drained_by text,
    ADD COLUMN drain_evicts boolean NOT NULL DEFAULT false,
    -- GPUs the node should have: the most it registered, reset when an admin undrains.
    ADD COLUMN expected_gpus integer NOT NULL DEFAULT 0,
    -- What the health rules already acted on: the exporter's boot and, per GPU, the
    -- Xid and uncorrectable-ECC counts seen (so one Xid drains once, not every second).
    ADD COLUMN health_marks jsonb NOT NULL DEFAULT '{}',
    -- Lasting conditions an admin accepted by undraining ("3:gpu_lost"): not drained again.
    ADD COLUMN health_waivers text[] NOT NULL DEFAULT '{}';

CREATE TABLE monitor.health_events (
    id bigserial PRIMARY KEY,
    node_id text NOT NULL REFERENCES monitor.nodes (id),
    at timestamptz NOT NULL DEFAULT now(),
    -- a rule's finding, or an admin's drain / undrain
    kind text NOT NULL CHECK (kind IN ('finding', 'drained', 'undrained')),
    gpu_index integer,
    condition text NOT NULL,
    action text NOT NULL CHECK (action IN ('drain', 'evict', 'ignore', 'none')),
    detail text NOT NULL,
    actor text NOT NULL
);
CREATE INDEX health_events_by_node ON monitor.health_events (node_id, at DESC);

-- One row per GPU per bucket, at two resolutions (10 s kept a day, 300 s a month).
CREATE TABLE monitor.gpu_history (
    resolution_s integer NOT NULL,
    bucket timestamptz NOT NULL,
    node_id text NOT NULL,
    gpu_index integer NOT NULL,
    job_id text,
    samples integer NOT NULL,
    utilization_avg real,
    utilization_max real,
    memory_used_mb_max integer,
    temperature_max real,
    power_avg real,
    PRIMARY KEY (resolution_s, node_id, gpu_index, bucket)
);
CREATE INDEX gpu_history_by_job ON monitor.gpu_history (job_id, resolution_s, bucket) WHERE job_id IS NOT NULL;
CREATE INDEX gpu_history_by_age ON monitor.gpu_history (resolution_s, bucket);

-- Each GPU as the monitor knows it: inventory, latest readings, node, and the job and task
-- holding it (a live attempt). Read by the monitor's /metrics and the API alike.
CREATE VIEW monitor.gpu_status AS
SELECT g.node_id, g.index, g.uuid, g.model, g.memory_total_mb,
       r.utilization_pct, r.memory_used_mb, r.temperature_c, r.memory_utilization_pct, r.power_w,
       r.sm_clock_mhz, r.throttle_reasons, r.ecc_corrected_volatile, r.ecc_uncorrected_volatile,
       r.remapped_rows_pending, r.remap_failure, r.last_xid,
       coalesce(r.lost, false) AS lost, coalesce(r.unsupported, '{}') AS unsupported,
       coalesce(r.updated_at, g.updated_at) AS updated_at,
       n.hostname, n.simulated, n.state AS node_state, n.drained_at IS NOT NULL AS drained,
       o.job_id, o.task
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
