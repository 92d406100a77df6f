-- name: open_alert
-- At most one open alert per fingerprint (a unique partial index): a repeat is a no-op.
INSERT INTO alerter.alerts (id, rule, fingerprint, severity, state, summary, labels, annotations)
VALUES ($1, $2, $3, $4, 'firing', $5, $6, $7)
ON CONFLICT (fingerprint) WHERE state <> 'resolved' DO NOTHING
RETURNING id;

-- name: record_transition
INSERT INTO alerter.alert_transitions (alert_id, from_state, to_state, actor, note)
VALUES ($1, $2, $3, $4, $5);

-- name: acknowledge
-- Only a firing alert can be acknowledged; returns nothing otherwise.
UPDATE alerter.alerts
SET state = 'acknowledged', acknowledged_by = $2, acknowledged_at = now(), updated_at = now()
WHERE id = $1 AND state = 'firing'
RETURNING id, rule, fingerprint;

-- name: resolve
-- A firing or acknowledged alert; returns its state before.
WITH before AS (SELECT id, state FROM alerter.alerts WHERE id = $1 AND state <> 'resolved' FOR UPDATE)
UPDATE alerter.alerts a
SET state = 'resolved', resolved_by = $2, resolved_at = now(), updated_at = now()
FROM before
WHERE a.id = before.id
RETURNING a.id, a.rule, a.fingerprint, before.state AS previous_state;

-- name: open_alert_by_fingerprint
SELECT id FROM alerter.alerts WHERE fingerprint = $1 AND state <> 'resolved';

-- name: alert_row
SELECT id, rule, fingerprint, severity, state, summary, labels, annotations, started_at, resolved_at,
       acknowledged_by, resolved_by
FROM alerter.alerts WHERE id = $1;

-- name: enqueue_notification
-- Due at $9 (NULL: now); a repeat of the same change is a new round ($8).
INSERT INTO alerter.notifications (alert_id, event, receiver, kind, url, payload, group_key, round,
                                   next_attempt_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, coalesce($9, now()))
ON CONFLICT (alert_id, event, receiver, round) DO NOTHING;

-- name: group_due
-- When a change to alert $3 is due at receiver $1 in group $2: with the group's batch
-- that is already waiting (not yet tried), if there is one; else, for a firing ($6) that
-- opens the group (no other open alert in it), after group_wait ($4 s); else group_interval
-- ($5 s) after the group's last message, or now if that is past.
SELECT coalesce(
    (SELECT min(next_attempt_at) FROM alerter.notifications
     WHERE receiver = $1 AND group_key = $2 AND state = 'pending' AND attempts = 0),
    CASE WHEN $6::bool AND NOT EXISTS (
             SELECT 1 FROM alerter.notifications n JOIN alerter.alerts a ON a.id = n.alert_id
             WHERE n.receiver = $1 AND n.group_key = $2 AND n.alert_id <> $3 AND a.state <> 'resolved')
         THEN now() + make_interval(secs => $4)
         ELSE greatest(now(), (SELECT last_sent_at + make_interval(secs => $5)
                               FROM alerter.notification_groups WHERE receiver = $1 AND group_key = $2))
    END);

-- name: group_sent
INSERT INTO alerter.notification_groups (receiver, group_key, last_sent_at)
VALUES ($1, $2, now())
ON CONFLICT (receiver, group_key) DO UPDATE SET last_sent_at = excluded.last_sent_at;

-- name: claim_notifications
-- Due rows, leased for $1 seconds: a crash mid-delivery leaves them due again after it.
UPDATE alerter.notifications n
SET attempts = n.attempts + 1, next_attempt_at = now() + make_interval(secs => $1)
WHERE n.id IN (
    SELECT id FROM alerter.notifications p
    WHERE state = 'pending' AND next_attempt_at <= now()
      -- in order per (alert, receiver): a resolve never overtakes its trigger
      AND NOT EXISTS (
          SELECT 1 FROM alerter.notifications e
          WHERE e.alert_id = p.alert_id AND e.receiver = p.receiver AND e.id < p.id AND e.state = 'pending')
    ORDER BY id FOR UPDATE SKIP LOCKED LIMIT $2
)
RETURNING n.id, n.alert_id, n.event, n.receiver, n.kind, n.url, n.payload, n.attempts, n.created_at,
          n.group_key;

-- name: notification_sent
UPDATE alerter.notifications
SET state = 'sent', sent_at = now(), last_status = $2, last_error = NULL
WHERE id = $1;

-- name: notification_retry
UPDATE alerter.notifications
SET next_attempt_at = now() + make_interval(secs => $2), last_status = $3, last_error = $4
WHERE id = $1;

-- name: notification_failed
UPDATE alerter.notifications
SET state = 'failed', last_status = $2, last_error = $3
WHERE id = $1;

-- name: enqueue_suppressed
-- The notification log keeps what was not sent, and why.
INSERT INTO alerter.notifications (alert_id, event, receiver, kind, url, payload, group_key, round,
                                   state, last_error)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'suppressed', $9)
ON CONFLICT (alert_id, event, receiver, round) DO NOTHING;

-- name: receivers_told
-- The receivers that were (or are being) told of an alert's firing, with their group.
SELECT receiver, group_key FROM (
    SELECT DISTINCT ON (receiver) receiver, group_key, id FROM alerter.notifications
    WHERE alert_id = $1 AND event = 'firing' AND state <> 'suppressed'
    ORDER BY receiver, round
) told
ORDER BY id;

-- name: repeat_candidates
-- Alerts still firing (nobody acknowledged them; not of the one-shot rules $1), with each
-- receiver's latest round of the firing, sent (how long ago) or suppressed: what
-- repeat_interval and ended silences act on.
SELECT a.id, a.rule, a.fingerprint, a.severity, a.state, a.summary, a.labels, a.annotations,
       a.started_at, a.resolved_at, last.receiver, last.group_key, last.round, last.state AS last_state,
       extract(epoch FROM now() - coalesce(last.sent_at, last.created_at))::float8 AS since_s
FROM alerter.alerts a
CROSS JOIN LATERAL (
    SELECT DISTINCT ON (receiver) receiver, group_key, round, state, sent_at, created_at
    FROM alerter.notifications n
    WHERE n.alert_id = a.id AND n.event = 'firing'
    ORDER BY receiver, round DESC
) last
WHERE a.state = 'firing' AND last.state IN ('sent', 'suppressed') AND a.rule <> ALL($1::text[])
ORDER BY a.started_at, last.receiver;

-- name: active_silences
SELECT id, matchers FROM alerter.silences WHERE starts_at <= now() AND ends_at > now() ORDER BY id;

-- name: open_unreachable_for_node
SELECT id FROM alerter.alerts
WHERE rule = 'NodeUnreachable' AND labels->>'node' = $1 AND state <> 'resolved'
LIMIT 1;

-- name: create_silence
INSERT INTO alerter.silences (id, matchers, starts_at, ends_at, created_by, comment)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (id) DO NOTHING;

-- name: expire_silence
UPDATE alerter.silences
SET ends_at = now(), starts_at = least(starts_at, now() - interval '1 millisecond'), expired_by = $2
WHERE id = $1 AND ends_at > now();

-- name: firing_alerts
-- Alerts nobody has acknowledged yet, with how long they have been firing.
SELECT id, rule, fingerprint, severity, state, summary, labels, annotations, started_at, resolved_at,
       extract(epoch FROM now() - started_at)::float8 AS age_s
FROM alerter.alerts WHERE state = 'firing' ORDER BY started_at;

-- name: jobs_pending_longer_than
-- With the scheduler's reason, when it has given one (scheduler.pending_status).
SELECT j.id, j.name, j.username, j.virtual_cluster, j.total_gpus,
       extract(epoch FROM now() - j.updated_at)::float8 AS age_s, p.reason, p.detail, q.position
FROM api.jobs j LEFT JOIN scheduler.pending_status p ON p.job_id = j.id
LEFT JOIN scheduler.queue_positions q ON q.job_id = p.job_id
WHERE j.state = 'PENDING' AND j.updated_at < now() - make_interval(secs => $1)
ORDER BY j.updated_at
LIMIT 1000;

-- name: idle_jobs
-- Running jobs whose every GPU stayed under $2 % for the last $1 s (history buckets of
-- 10 s covering at least 80 % of the window: no history, no verdict).
SELECT a.job_id, min(a.node_id) AS node_id, count(DISTINCT (a.node_id, g.gpu)) AS gpus,
       max(h.utilization_max) AS util_max
FROM launcher.attempts a
CROSS JOIN LATERAL unnest(a.gpu_indices) AS g(gpu)
JOIN monitor.gpu_history h
  ON h.resolution_s = 10 AND h.node_id = a.node_id AND h.gpu_index = g.gpu
 AND h.bucket >= now() - make_interval(secs => $1)
WHERE a.state = 'RUNNING' AND a.started_at <= now() - make_interval(secs => $1)
GROUP BY a.job_id
HAVING max(h.utilization_max) < $2
   AND count(h.bucket) >= 0.8 * ($1 / 10.0) * count(DISTINCT (a.node_id, g.gpu));

-- name: open_condition_alerts
SELECT id, fingerprint FROM alerter.alerts WHERE rule = ANY($1::text[]) AND state <> 'resolved';

-- name: starved_virtual_clusters
-- Virtual clusters with jobs pending for over $1 s while none of their jobs was placed in
-- that time: they get nothing. (Once quotas exist, "below its guarantee" sharpens this.)
SELECT j.virtual_cluster, count(*)::int AS jobs, sum(j.total_gpus)::int AS gpus,
       max(extract(epoch FROM now() - j.updated_at))::float8 AS waited_s
FROM api.jobs j
WHERE j.state = 'PENDING' AND j.updated_at < now() - make_interval(secs => $1)
  AND NOT EXISTS (
      SELECT 1 FROM scheduler.allocations a JOIN api.jobs k ON k.id = a.job_id
      WHERE k.virtual_cluster = j.virtual_cluster AND a.created_at > now() - make_interval(secs => $1))
GROUP BY j.virtual_cluster
ORDER BY j.virtual_cluster;

-- name: silent_services
-- Services ($2) with instances on record, none heard in the last $1 s (a clean stop
-- removes its row: only a crash, a hang or a lost database connection leaves one ageing).
SELECT service, count(*)::int AS instances, extract(epoch FROM now() - max(last_seen_at))::float8 AS silent_s
FROM corral.service_instances
WHERE service = ANY($2::text[])
GROUP BY service
HAVING max(last_seen_at) < now() - make_interval(secs => $1)
ORDER BY service;

-- name: job_owner
SELECT username, virtual_cluster FROM api.jobs WHERE id = $1;

-- name: set_rule_overrides
INSERT INTO alerter.rule_overrides (overrides, version, updated_by)
VALUES ($1, 1, $2)
ON CONFLICT (singleton) DO UPDATE
SET overrides = excluded.overrides, version = alerter.rule_overrides.version + 1,
    updated_by = excluded.updated_by, updated_at = now();

-- name: rule_overrides
SELECT overrides, version FROM alerter.rule_overrides;

-- name: publish_rules_in_force
INSERT INTO alerter.rules_in_force (rules, file, problem, overrides_version)
VALUES ($1, $2, $3, $4)
ON CONFLICT (singleton) DO UPDATE
SET rules = excluded.rules, file = excluded.file, problem = excluded.problem,
    overrides_version = excluded.overrides_version, updated_at = now();
