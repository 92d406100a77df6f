"""A busy cluster's rows, written straight into Postgres in a few set-based statements.

The portal's benchmark (``bench.portal``) and its browser tests need what a cluster that
has run for a day holds: thousands of jobs in every state with their attempts, hundreds
of nodes of eight GPUs with their latest readings, a day of GPU history, some alerts.
Going through the API (or the simulated nodes) would take hours; the portal only reads
these tables, so each is filled by one ``INSERT … SELECT generate_series`` instead,
with values shaped like the services' own (ids as ``shared/ids.py`` makes them, specs as
the API stores them, history buckets on the monitor's resolutions).

Every function takes a plain asyncpg connection (no JSON codec) of the database's owner and returns how many
rows it wrote. What it writes is deterministic (no randomness), so two runs compare.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import asyncpg

from shared.jobs import JobSpec

# The monitor's history resolutions (services/monitor/settings.py defaults).
FINE_RESOLUTION_S = 10
COARSE_RESOLUTION_S = 300
SEED_USERS = ("alice", "bob", "carol", "dave", "erin")
SEED_VCS = ("default", "research", "prod")


def job_spec(name: str = "seeded", gpus: int = 1) -> str:
    """A one-task job's spec as the API stores it (``JobSpec.model_dump(mode="json")``)."""
    spec = JobSpec.model_validate(
        {"name": name, "tasks": [{"name": "main", "command": "python train.py", "resources": {"gpus": gpus}}]}
    )
    return json.dumps(spec.model_dump(mode="json"))


async def seed_virtual_clusters(conn: asyncpg.Connection) -> int:
    """The VCs the seeded jobs name (``default`` exists already), each with a quota."""
    await conn.execute(
        """INSERT INTO api.virtual_clusters (name, description, quota)
           SELECT vc, 'seeded for the portal', jsonb_build_object('H100', 1000)
           FROM unnest($1::text[]) vc
           ON CONFLICT (name) DO NOTHING""",
        list(SEED_VCS),
    )
    return len(SEED_VCS)


async def seed_jobs(
    conn: asyncpg.Connection,
    count: int,
    *,
    users: tuple[str, ...] = SEED_USERS,
    prefix: str = "job-seed",
    span_s: float = 86_400.0,
    states: tuple[str, ...] = ("SUCCEEDED", "FAILED", "CANCELLED", "SUCCEEDED", "RUNNING", "PENDING"),
) -> int:
    """``count`` jobs submitted over the last ``span_s``, newest ``{prefix}{count-1:08d}``
    (so ids sort as they were created), cycling through ``users``, ``SEED_VCS`` and
    ``states`` independently; each one that started has its attempt (a RUNNING one's still running, on
    ``node-NNNN`` if seeded nodes exist)."""
    now = datetime.now(UTC)
    await conn.execute(
        """INSERT INTO api.jobs (id, name, username, virtual_cluster, spec, total_gpus, state,
                                 created_at, updated_at, finished_at, exit_code)
           SELECT $1 || lpad(i::text, 8, '0'), 'train-' || (i % 97),
                  ($2::text[])[1 + i % cardinality($2::text[])],
                  ($3::text[])[1 + (i / 37) % cardinality($3::text[])],
                  $4::jsonb, 1, t.state, t.created, t.created,
                  CASE WHEN t.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
                       THEN t.created + make_interval(secs => 60 + i % 3600) END,
                  CASE t.state WHEN 'SUCCEEDED' THEN 0 WHEN 'FAILED' THEN 1 END
           FROM generate_series(0, $6::int - 1) i,
                LATERAL (SELECT $7::timestamptz - make_interval(secs => ($6::int - i) * $8::float8 / $6::int)
                                AS created,
                                -- not in step with the user: every user has jobs in every state
                                ($5::text[])[1 + (i / cardinality($2::text[])) % cardinality($5::text[])]
                                AS state) t""",
        prefix,
        list(users),
        list(SEED_VCS),
        job_spec(),
        list(states),
        count,
        now,
        span_s,
    )
    nodes = await conn.fetchval("SELECT count(*) FROM monitor.nodes WHERE id LIKE 'node-%'")
    await conn.execute(
        """INSERT INTO launcher.attempts (id, job_id, generation, task_role, task_index, attempt_no,
                                          node_id, gpu_indices, state, exit_code, created_at,
                                          started_at, finished_at, classification)
           SELECT 'att-' || substr(j.id, 5), j.id, 0, 'main', 0, 1,
                  CASE WHEN $2::int > 0 THEN 'node-' || lpad((j.slot % $2::int)::text, 4, '0')
                       ELSE 'local' END,
                  ARRAY[j.slot / greatest($2::int, 1) % 8],
                  CASE WHEN j.state = 'RUNNING' THEN 'RUNNING' ELSE 'EXITED' END,
                  j.exit_code, j.created_at,
                  j.created_at + make_interval(secs => 5 + j.slot % 120),
                  j.finished_at,
                  CASE j.state WHEN 'FAILED' THEN 'permanent' END
           -- Running jobs are numbered apart, so no two hold the same GPU (up to the GPUs there are).
           FROM (SELECT *, (row_number() OVER (PARTITION BY state = 'RUNNING' ORDER BY id))::int - 1 AS slot
                 FROM api.jobs
                 WHERE id LIKE $1 || '%' AND state <> 'PENDING') j""",
        prefix,
        nodes,
    )
    # What the scheduler holds for the running ones: the home page counts GPUs in use here.
    await conn.execute(
        """INSERT INTO scheduler.allocations (job_id, generation, task_role, task_index, node_id,
                                              gpu_indices, created_at)
           SELECT a.job_id, 0, 'main', 0, a.node_id, a.gpu_indices, a.started_at
           FROM launcher.attempts a
           WHERE a.job_id LIKE $1 || '%' AND a.state = 'RUNNING'""",
        prefix,
    )
    return count


async def seed_nodes(conn: asyncpg.Connection, nodes: int, gpus: int = 8) -> int:
    """``nodes`` READY simulated nodes ``node-0000``… of ``gpus`` H100s, each GPU with a
    fresh reading (a few busy, some idle, one in 97 with an Xid), in racks of 16."""
    await conn.execute(
        """INSERT INTO monitor.nodes (id, hostname, simulated, state, gpu_count, last_heartbeat,
                                      expected_gpus, rack, cpus, memory_mb)
           SELECT 'node-' || lpad(n::text, 4, '0'), 'node-' || lpad(n::text, 4, '0') || '.seed',
                  true, 'READY', $2, now(), $2, 'rack-' || (n / 16), 96, 1024 * 1024
           FROM generate_series(0, $1::int - 1) n""",
        nodes,
        gpus,
    )
    await conn.execute(
        """INSERT INTO monitor.gpus (node_id, index, uuid, model, memory_total_mb)
           SELECT 'node-' || lpad(n::text, 4, '0'), g, 'GPU-seed-' || n || '-' || g,
                  'NVIDIA H100 80GB HBM3 (Simulated)', 81559
           FROM generate_series(0, $1::int - 1) n, generate_series(0, $2::int - 1) g""",
        nodes,
        gpus,
    )
    await conn.execute(
        """INSERT INTO monitor.gpu_readings (node_id, index, utilization_pct, memory_utilization_pct,
                                             memory_used_mb, temperature_c, power_w, sm_clock_mhz,
                                             last_xid, xid_count)
           SELECT 'node-' || lpad(n::text, 4, '0'), g, u, u / 2, (u * 800)::int, 35 + u / 2,
                  80 + u * 6, 1980, CASE WHEN (n * $2 + g) % 97 = 0 THEN 79 END,
                  CASE WHEN (n * $2 + g) % 97 = 0 THEN 1 ELSE 0 END
           FROM generate_series(0, $1::int - 1) n, generate_series(0, $2::int - 1) g,
                LATERAL (SELECT ((n * 7 + g * 13) % 100)::real AS u) r""",
        nodes,
        gpus,
    )
    await conn.execute(
        """INSERT INTO launcher.agents (node_id, epoch, lease_expires_at, isolation, machine_cpus)
           SELECT 'node-' || lpad(n::text, 4, '0'), 1, now() + interval '1 hour', 'cgroup', 96
           FROM generate_series(0, $1::int - 1) n""",
        nodes,
    )
    return nodes * gpus


async def seed_gpu_history(
    conn: asyncpg.Connection, *, hours: float = 24.0, resolution_s: int = FINE_RESOLUTION_S
) -> int:
    """``hours`` of history for every seeded GPU at ``resolution_s``, ending now: what the
    monitor writes (the fine resolution) or rolls up (the coarse one), each GPU's rows
    naming the job that holds it now (as if it had run all along)."""
    buckets = int(hours * 3600 // resolution_s)
    # Oldest bucket first, every GPU within it: both indexes (by GPU then time, and by
    # time) then grow at a few thousand places at once, which stay in memory. The buckets
    # and the GPUs' jobs are worked out once, not per row.
    status = await conn.execute(
        """WITH held AS (
               SELECT DISTINCT ON (g.node_id, g.index) g.node_id, g.index, a.job_id,
                      (g.index * 13 + hashtext(g.node_id) % 50 + 50) AS phase
               FROM monitor.gpus g
               LEFT JOIN scheduler.allocations a
                 ON a.node_id = g.node_id AND g.index = ANY (a.gpu_indices) AND a.released_at IS NULL
               WHERE g.node_id LIKE 'node-%'
               ORDER BY g.node_id, g.index, a.created_at DESC),
           buckets AS MATERIALIZED (
               SELECT k, to_timestamp((floor(extract(epoch FROM now()) / $1) - k) * $1) AS at
               FROM generate_series($2::int, 1, -1) k)
           INSERT INTO monitor.gpu_history (resolution_s, bucket, node_id, gpu_index, job_id, samples,
                                            utilization_avg, utilization_max, memory_used_mb_max,
                                            temperature_max, power_avg)
           SELECT $1, b.at, h.node_id, h.index, h.job_id, $1 / 10 + 1, u, least(100, u + 5),
                  (u * 800)::int, 35 + u / 2, 80 + u * 6
           FROM buckets b, held h, LATERAL (SELECT ((b.k + h.phase) % 100)::real AS u) r""",
        resolution_s,
        buckets,
    )
    return int(status.split()[-1])


async def fold_job_usage(conn: asyncpg.Connection) -> int:
    """What the monitor folds from the coarse history into each job's daily GPU usage
    (``monitor.job_gpu_usage_daily``, read by the usage page), up to the last bucket."""
    status = await conn.execute(
        """INSERT INTO monitor.job_gpu_usage_daily (day, job_id, samples, utilization_sum)
           SELECT (bucket AT TIME ZONE 'UTC')::date, job_id, sum(samples),
                  sum(utilization_avg * samples)
           FROM monitor.gpu_history
           WHERE resolution_s = $1 AND job_id IS NOT NULL
           GROUP BY 1, 2""",
        COARSE_RESOLUTION_S,
    )
    await conn.execute(
        """UPDATE monitor.job_gpu_usage_mark
           SET folded_until = (SELECT max(bucket) + make_interval(secs => $1)
                               FROM monitor.gpu_history WHERE resolution_s = $1)""",
        COARSE_RESOLUTION_S,
    )
    return int(status.split()[-1])


async def seed_alerts(conn: asyncpg.Connection, count: int = 30) -> int:
    """Alerts of every severity and state, a GpuUnhealthy for each GPU that reported an Xid."""
    await conn.execute(
        """INSERT INTO alerter.alerts (id, rule, fingerprint, severity, state, summary, labels,
                                       started_at, updated_at)
           SELECT 'alr-seed' || lpad(i::text, 6, '0'),
                  (ARRAY['GpuUnhealthy', 'NodeUnreachable', 'JobFailed'])[1 + i % 3],
                  'seed-' || i,
                  (ARRAY['critical', 'warning', 'info'])[1 + i % 3],
                  (ARRAY['firing', 'acknowledged', 'resolved'])[1 + (i / 3) % 3],
                  'seeded alert ' || i || ' on node-' || lpad((i * 7)::text, 4, '0'),
                  jsonb_build_object('node', 'node-' || lpad((i * 7)::text, 4, '0')),
                  now() - make_interval(mins => i * 17), now() - make_interval(mins => i * 5)
           FROM generate_series(0, $1::int - 1) i""",
        count,
    )
    return count


async def analyze(conn: asyncpg.Connection) -> None:
    """Fresh planner statistics, as autovacuum would have after a day of these rows."""
    await conn.execute(
        "ANALYZE api.jobs, launcher.attempts, scheduler.allocations, monitor.nodes, monitor.gpus,"
        " monitor.gpu_readings, monitor.gpu_history, monitor.job_gpu_usage_daily, alerter.alerts"
    )
