-- name: open_alert
-- At most one open alert per fingerprint (a unique partial index): a repeat is a no-op.
INSERT INTO alerter.alerts (id, rule, fingerprint, severity, state, summary, labels)
VALUES ($1, $2, $3, $4, 'firing', $5, $6)
ON CONFLICT (fingerprint) WHERE state <> 'resolved' DO NOTHING
RETURNING id;
