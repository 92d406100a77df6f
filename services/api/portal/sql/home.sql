-- name: home_gpus_by_model
-- Every registered GPU counted once per GPU model (the caller maps models to types):
-- held by a live allocation, free to place (on a ready, undrained node and not lost), or
-- neither (its node is drained or unreachable, or NVML lost it).
SELECT g.model,
       count(*)::int AS total,
       count(*) FILTER (WHERE held.gpu IS NOT NULL)::int AS used,
       count(*) FILTER (WHERE held.gpu IS NULL AND n.state = 'READY' AND n.drained_at IS NULL
                          AND NOT coalesce(r.lost, false))::int AS free
FROM monitor.gpus g
JOIN monitor.nodes n ON n.id = g.node_id
LEFT JOIN monitor.gpu_readings r ON r.node_id = g.node_id AND r.index = g.index
LEFT JOIN LATERAL (
    SELECT 1 AS gpu FROM scheduler.allocations a
    WHERE a.released_at IS NULL AND a.node_id = g.node_id AND g.index = ANY (a.gpu_indices)
    LIMIT 1) held ON true
GROUP BY g.model
ORDER BY g.model;

-- name: home_utilisation_series
-- The cluster's mean GPU utilisation per bucket of resolution $1 s over the last $2 s,
-- weighted by samples (a GPU heard twice as often counts twice, as in the monitor's
-- roll-up). Buckets without a reading are absent. The minutes since the last coarse
-- bucket come from the fine history, binned the same way (a partial last bucket), so a
-- cluster started a minute ago already has a chart; the fine resolution is whichever the
-- monitor writes below $1 (one index probe).
WITH coarse AS (
    SELECT bucket, utilization_avg, samples FROM monitor.gpu_history
    WHERE resolution_s = $1 AND bucket >= now() - make_interval(secs => $2)
), fine AS (
    SELECT resolution_s FROM monitor.gpu_history WHERE resolution_s < $1 ORDER BY resolution_s DESC LIMIT 1
), recent AS (
    SELECT date_bin(make_interval(secs => $1), h.bucket, 'epoch'::timestamptz) AS bucket,
           h.utilization_avg, h.samples
    FROM monitor.gpu_history h, fine
    WHERE h.resolution_s = fine.resolution_s
      AND h.bucket >= coalesce((SELECT max(bucket) FROM coarse) + make_interval(secs => $1),
                               now() - make_interval(secs => $2))
)
SELECT extract(epoch FROM bucket)::bigint AS at_s,
       (sum(utilization_avg * samples) / nullif(sum(samples) FILTER (WHERE utilization_avg IS NOT NULL), 0))::float8
           AS utilisation_pct
FROM (SELECT * FROM coarse UNION ALL SELECT * FROM recent) AS h
GROUP BY bucket
ORDER BY bucket;

-- name: home_job_states
-- Jobs by state: those waiting or placed now, and those that ended within the last $2 s
-- ($1: one user's, NULL: everyone's).
SELECT state, count(*)::int AS jobs
FROM api.jobs
WHERE ($1::text IS NULL OR username = $1)
  AND (state IN ('PENDING', 'SCHEDULED', 'RUNNING') OR finished_at >= now() - make_interval(secs => $2))
GROUP BY state;

-- name: home_open_alerts
-- Alerts not resolved, newest first, with how many there are per severity (each row
-- carries the counts, so one round trip serves the panel). $1: only the alerts about that
-- user's jobs, as GET /api/v1/alerts shows a user (NULL: an admin, every alert).
WITH open AS (
    SELECT a.id, a.rule, a.severity, a.state, a.summary, a.started_at
    FROM alerter.alerts a
    WHERE a.state <> 'resolved'
      AND ($1::text IS NULL OR EXISTS (
            SELECT 1 FROM api.jobs j WHERE j.id = a.labels->>'job' AND j.username = $1))),
counts AS (SELECT jsonb_object_agg(severity, alerts) AS per_severity
           FROM (SELECT severity, count(*)::int AS alerts FROM open GROUP BY severity) s)
SELECT counts.per_severity, latest.*
FROM counts
LEFT JOIN LATERAL (SELECT * FROM open ORDER BY started_at DESC, id DESC LIMIT $2) latest ON true;

-- name: home_idle_jobs
-- Running jobs whose GPUs have idled: placed at least $1 s ago, every GPU they hold
-- reading under $2 % now, and in the last $1 s of $4-second history no bucket of any of
-- their GPUs peaking at $2 % or more, with buckets covering at least 80 % of that window
-- (no readings, no verdict). $3: one user's jobs (NULL: everyone's).
--
-- The current readings (one row per GPU) cut the candidates first, so the history is
-- read (through gpu_history_by_job) only for jobs that are quiet now. Over the whole
-- held time the mean comes from the $5-second roll-up, and from the $4-second buckets
-- after the last roll-up, which lags by a few minutes.
WITH held AS (
    SELECT a.job_id, j.name, j.username, j.virtual_cluster, j.cancel_requested_at IS NOT NULL AS stopping,
           sum(cardinality(a.gpu_indices))::int AS gpus,
           min(a.created_at) AS held_since,
           (sum(cardinality(a.gpu_indices) * extract(epoch FROM now() - a.created_at)) / 3600)::float8
               AS gpu_hours_held
    FROM scheduler.allocations a
    JOIN api.jobs j ON j.id = a.job_id AND j.generation = a.generation
    WHERE a.released_at IS NULL AND j.state = 'RUNNING' AND cardinality(a.gpu_indices) > 0
      AND ($3::text IS NULL OR j.username = $3)
    GROUP BY a.job_id, j.name, j.username, j.virtual_cluster, j.cancel_requested_at
    HAVING min(a.created_at) <= now() - make_interval(secs => $1)),
quiet_now AS (
    SELECT h.* FROM held h
    WHERE NOT EXISTS (
        SELECT 1
        FROM scheduler.allocations a
        CROSS JOIN LATERAL unnest(a.gpu_indices) AS g(gpu)
        LEFT JOIN monitor.gpu_readings r ON r.node_id = a.node_id AND r.index = g.gpu
        WHERE a.job_id = h.job_id AND a.released_at IS NULL
          AND (r.utilization_pct IS NULL OR r.utilization_pct >= $2))),
recent AS (
    SELECT q.*, count(x.bucket)::int AS buckets, max(x.utilization_max)::float8 AS recent_peak_pct,
           (sum(x.utilization_avg * x.samples) / nullif(sum(x.samples), 0))::float8 AS recent_pct
    FROM quiet_now q
    JOIN monitor.gpu_history x
      ON x.job_id = q.job_id AND x.resolution_s = $4 AND x.bucket >= now() - make_interval(secs => $1)
    GROUP BY q.job_id, q.name, q.username, q.virtual_cluster, q.stopping, q.gpus, q.held_since,
             q.gpu_hours_held),
idle AS (
    SELECT * FROM recent
    WHERE recent_peak_pct < $2 AND buckets >= 0.8 * ($1 / $4::float8) * gpus),
-- Materialized: each is one pass over the idle jobs, not one per row joined to it.
coarse AS MATERIALIZED (
    SELECT i.job_id, sum(x.samples) AS samples, sum(x.utilization_avg * x.samples) AS weighted,
           max(x.bucket) + make_interval(secs => $5) AS covered_until
    FROM idle i
    JOIN monitor.gpu_history x
      ON x.job_id = i.job_id AND x.resolution_s = $5
     AND x.bucket >= date_bin(make_interval(secs => $5), i.held_since, 'epoch'::timestamptz)
    WHERE x.utilization_avg IS NOT NULL
    GROUP BY i.job_id),
fine AS MATERIALIZED (
    SELECT i.job_id, sum(x.samples) AS samples, sum(x.utilization_avg * x.samples) AS weighted
    FROM idle i
    LEFT JOIN coarse c ON c.job_id = i.job_id
    JOIN monitor.gpu_history x
      ON x.job_id = i.job_id AND x.resolution_s = $4
     AND x.bucket >= greatest(i.held_since, coalesce(c.covered_until, i.held_since))
    WHERE x.utilization_avg IS NOT NULL
    GROUP BY i.job_id)
SELECT i.job_id, i.name, i.username, i.virtual_cluster, i.stopping, i.gpus, i.held_since,
       extract(epoch FROM now() - i.held_since)::float8 AS held_s, i.gpu_hours_held,
       ((coalesce(c.weighted, 0) + coalesce(f.weighted, 0))
        / nullif(coalesce(c.samples, 0) + coalesce(f.samples, 0), 0))::float8 AS held_mean_pct,
       i.recent_pct, i.recent_peak_pct
FROM idle i
LEFT JOIN coarse c ON c.job_id = i.job_id
LEFT JOIN fine f ON f.job_id = i.job_id
ORDER BY i.gpu_hours_held DESC, i.job_id
LIMIT $6;
