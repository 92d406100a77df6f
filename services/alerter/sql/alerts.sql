-- name: open_alert
-- At most one open alert per fingerprint (a unique partial index): a repeat is a no-op.
INSERT INTO alerter.alerts (id, rule, fingerprint, severity, state, summary, labels)
VALUES ($1, $2, $3, $4, 'firing', $5, $6)
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
