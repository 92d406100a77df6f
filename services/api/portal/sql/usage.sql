-- name: usage_by_day_user_vc
-- GPU-hours per UTC day, user and VC within [$1, min($2, now())) ($3: one user's, NULL:
-- everyone's). Held: each allocation's GPUs x the part of its life (placed until
-- released, or now) inside the day. Used: held x the job's mean GPU utilisation that day,
-- from the monitor's daily fold of its 5-minute history (monitor.job_gpu_usage_daily: a
-- row per job and day, so a month of usage reads a few thousand rows). Held time of a job
-- with no readings that day (a GPU NVML cannot read, or not folded yet: the last quarter
-- of an hour) counts as held without readings, never as used.
WITH span AS (SELECT $1::timestamptz AS since, least($2::timestamptz, now()) AS until),
held AS (
    SELECT a.job_id, j.username, j.virtual_cluster, cardinality(a.gpu_indices) AS gpus,
           greatest(a.created_at, s.since) AS held_from,
           least(coalesce(a.released_at, now()), s.until) AS held_to
    FROM scheduler.allocations a
    JOIN api.jobs j ON j.id = a.job_id
    CROSS JOIN span s
    WHERE a.created_at < s.until AND (a.released_at IS NULL OR a.released_at > s.since)
      AND cardinality(a.gpu_indices) > 0
      AND ($3::text IS NULL OR j.username = $3)),
pieces AS (
    -- Days are 24-hour bins from the epoch: UTC days, whatever the session's time zone.
    SELECT h.job_id, h.username, h.virtual_cluster, (d.day AT TIME ZONE 'UTC')::date AS day,
           h.gpus * extract(epoch FROM least(h.held_to, d.day + interval '24 hours')
                                       - greatest(h.held_from, d.day)) / 3600 AS gpu_hours
    FROM held h
    CROSS JOIN LATERAL generate_series(date_bin(interval '24 hours', h.held_from, 'epoch'::timestamptz),
                                       h.held_to, interval '24 hours') AS d(day)
    WHERE least(h.held_to, d.day + interval '24 hours') > greatest(h.held_from, d.day)),
utilisation AS (
    SELECT u.job_id, u.day, u.utilization_sum / nullif(u.samples, 0) AS mean_pct
    FROM monitor.job_gpu_usage_daily u
    WHERE u.job_id IN (SELECT job_id FROM held)
      AND u.day >= ((SELECT since FROM span) AT TIME ZONE 'UTC')::date
      AND u.day <= ((SELECT until FROM span) AT TIME ZONE 'UTC')::date)
SELECT p.day, p.username, p.virtual_cluster,
       sum(p.gpu_hours)::float8 AS gpu_hours_held,
       coalesce(sum(p.gpu_hours * u.mean_pct / 100), 0)::float8 AS gpu_hours_used,
       coalesce(sum(p.gpu_hours) FILTER (WHERE u.mean_pct IS NULL), 0)::float8 AS gpu_hours_unmeasured
FROM pieces p
LEFT JOIN utilisation u ON u.job_id = p.job_id AND u.day = p.day
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;
