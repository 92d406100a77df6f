-- name: list_alerts
-- Newest first; $2 (a username) limits them to alerts about that user's jobs.
SELECT a.id, a.rule, a.severity, a.state, a.summary, a.labels, a.started_at, a.updated_at,
       a.acknowledged_by, a.acknowledged_at, a.resolved_by, a.resolved_at
FROM alerter.alerts a
WHERE ($1::text IS NULL OR a.state = $1)
  AND ($2::text IS NULL OR EXISTS (
        SELECT 1 FROM api.jobs j WHERE j.id = a.labels->>'job' AND j.username = $2))
  AND ($3::text IS NULL OR a.id = $3)
ORDER BY a.started_at DESC, a.id DESC
LIMIT $4;

-- name: alert_transitions
SELECT at, from_state, to_state, actor, note
FROM alerter.alert_transitions WHERE alert_id = $1 ORDER BY id;

-- name: list_silences
SELECT id, matchers, starts_at, ends_at, created_by, comment, created_at, expired_by,
       CASE WHEN ends_at <= now() THEN 'expired' WHEN starts_at > now() THEN 'pending' ELSE 'active' END AS status
FROM alerter.silences
WHERE $1::text IS NULL OR id = $1
ORDER BY created_at DESC, id DESC
LIMIT 500;

-- name: alert_rules
SELECT f.rules, coalesce(o.overrides, '{}'::jsonb) AS overrides, coalesce(o.version, 0) AS overrides_version,
       o.updated_by AS overrides_by, o.updated_at AS overrides_at, f.overrides_version AS in_force_version,
       f.file, f.problem
FROM (SELECT 1) one
LEFT JOIN alerter.rule_overrides o ON true
LEFT JOIN alerter.rules_in_force f ON true;
