-- name: jobs_page
-- One page of the job list, newest first, with how long each job waited and ran.
-- $1 states, $2 VC, $3 owner, $4 an ILIKE pattern for the name or id (escaped by the
-- caller), $5/$6 the keyset cursor (created_at, id of the last row of the previous page),
-- $7 the page size. The inner query walks one of the newest-first indexes and stops after
-- $7 rows; only then are the attempts of those rows read (attempts_by_job), so the page
-- costs the same however many jobs there are.
-- wait_s: submit to the first attempt's start; still waiting, submit to now (or to the end,
-- for a job that ended before it ever started).
-- runtime_s: the latest run (the job's current generation), from its first task's start to
-- the job's end, to now while a task of it is live, else to its last task's end.
SELECT j.id, j.name, j.username, j.virtual_cluster, j.state, j.total_gpus, j.created_at,
       j.finished_at,
       extract(epoch FROM coalesce(a.first_started_at, j.finished_at, now()) - j.created_at)::float8
           AS wait_s,
       CASE WHEN a.run_started_at IS NULL THEN NULL
            ELSE extract(epoch FROM CASE WHEN j.finished_at IS NOT NULL THEN j.finished_at
                                         WHEN a.live THEN now()
                                         ELSE a.run_finished_at END - a.run_started_at)::float8
       END AS runtime_s
FROM (
    SELECT id, name, username, virtual_cluster, state, total_gpus, generation, created_at, finished_at
    FROM api.jobs
    WHERE ($1::text[] IS NULL OR state = ANY ($1))
      AND ($2::text IS NULL OR virtual_cluster = $2)
      AND ($3::text IS NULL OR username = $3)
      AND ($4::text IS NULL OR name ILIKE $4 OR id ILIKE $4)
      AND ($5::timestamptz IS NULL OR (created_at, id) < ($5, $6::text))
    ORDER BY created_at DESC, id DESC
    LIMIT $7
) j
LEFT JOIN LATERAL (
    SELECT min(started_at) AS first_started_at,
           min(started_at) FILTER (WHERE generation = j.generation) AS run_started_at,
           max(finished_at) FILTER (WHERE generation = j.generation) AS run_finished_at,
           bool_or(state IN ('ASSIGNED', 'STARTING', 'RUNNING') AND generation = j.generation) AS live
    FROM launcher.attempts WHERE job_id = j.id
) a ON true
ORDER BY j.created_at DESC, j.id DESC;

-- name: job_gpu_series
-- A job's GPUs over time, one point per bucket: their mean and highest utilisation and the
-- memory they used together. $2 is the resolution (10 s rows are kept a day, 300 s rows a
-- month), $3 where the chart starts (gpu_history_by_job).
SELECT extract(epoch FROM bucket)::float8 AS at_s,
       avg(utilization_avg)::float8 AS utilization_avg,
       max(utilization_max)::float8 AS utilization_max,
       (sum(memory_used_mb_max) / 1024.0)::float8 AS memory_used_gib
FROM monitor.gpu_history
WHERE job_id = $1 AND resolution_s = $2 AND bucket >= $3
GROUP BY bucket
ORDER BY bucket
LIMIT 10000;

-- name: jobs_newer_keys
-- The keys of the jobs at and after ($5, $6), oldest first, at most $7: where the page
-- before one that starts after ($5, $6) begins (same filters as jobs_page).
SELECT created_at, id
FROM api.jobs
WHERE ($1::text[] IS NULL OR state = ANY ($1))
  AND ($2::text IS NULL OR virtual_cluster = $2)
  AND ($3::text IS NULL OR username = $3)
  AND ($4::text IS NULL OR name ILIKE $4 OR id ILIKE $4)
  AND (created_at, id) >= ($5::timestamptz, $6::text)
ORDER BY created_at, id
LIMIT $7;
