-- name: insert_webhook
INSERT INTO api.webhooks (id, username, sees_all, url, event_types, virtual_cluster, description)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id, username, url, event_types, virtual_cluster, description, enabled, disabled_reason,
          created_at, updated_at;

-- name: insert_webhook_secret
INSERT INTO api.webhook_secrets (webhook_id, secret) VALUES ($1, $2);

-- name: list_webhooks
-- $1: an owner's, or every webhook when NULL; $2: one webhook, or all.
SELECT w.id, w.username, w.url, w.event_types, w.virtual_cluster, w.description, w.enabled,
       w.disabled_reason, w.created_at, w.updated_at,
       (SELECT count(*) FROM api.webhook_secrets s
        WHERE s.webhook_id = w.id AND (s.expires_at IS NULL OR s.expires_at > now())) AS signing_secrets
FROM api.webhooks w
WHERE ($1::text IS NULL OR w.username = $1) AND ($2::text IS NULL OR w.id = $2)
ORDER BY w.created_at DESC, w.id DESC
LIMIT 1000;

-- name: lock_webhook
SELECT id, username, enabled FROM api.webhooks
WHERE id = $1 AND ($2::text IS NULL OR username = $2) FOR UPDATE;

-- name: delete_webhook
DELETE FROM api.webhooks WHERE id = $1;

-- name: expire_webhook_secrets
-- A rotation: the secrets in force keep signing until $2 (unless they expire sooner).
UPDATE api.webhook_secrets SET expires_at = least(coalesce(expires_at, $2), $2)
WHERE webhook_id = $1 AND (expires_at IS NULL OR expires_at > now());

-- name: enabled_webhooks
-- What the fan-in matches each event against. An admin's webhook sees every event only
-- while its owner is still an admin; a deleted user's webhooks get nothing.
SELECT w.id, w.username, w.sees_all AND u.role = 'admin' AS sees_all, w.event_types, w.virtual_cluster
FROM api.webhooks w JOIN api.users u ON u.name = w.username
WHERE w.enabled;

-- name: enqueue_delivery
-- One delivery per (webhook, event): a redelivered event adds nothing.
INSERT INTO api.webhook_deliveries (webhook_id, event_id, event_type, payload)
SELECT unnest($1::text[]), $2, $3, $4
ON CONFLICT (webhook_id, event_id) DO NOTHING;

-- name: claim_deliveries
-- Due deliveries of enabled webhooks, leased for $1 seconds: a crash mid-send leaves them
-- due again after it. attempts counts this try.
UPDATE api.webhook_deliveries d
SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => $1)
FROM api.webhooks w
WHERE w.id = d.webhook_id AND d.id IN (
    SELECT p.id FROM api.webhook_deliveries p JOIN api.webhooks e ON e.id = p.webhook_id
    WHERE p.state = 'pending' AND p.next_attempt_at <= now() AND e.enabled
    ORDER BY p.next_attempt_at, p.id
    FOR UPDATE OF p SKIP LOCKED LIMIT $2)
RETURNING d.id, d.webhook_id, d.event_id, d.payload, d.attempts, w.url;

-- name: signing_secrets
-- Newest first; every secret in force signs (more than one during a rotation).
SELECT webhook_id, secret FROM api.webhook_secrets
WHERE webhook_id = ANY($1::text[]) AND (expires_at IS NULL OR expires_at > now())
ORDER BY id DESC;

-- name: record_attempt
INSERT INTO api.webhook_attempts (delivery_id, status, error, duration_ms) VALUES ($1, $2, $3, $4);

-- name: delivery_succeeded
UPDATE api.webhook_deliveries
SET state = 'delivered', last_status = $2, last_error = NULL, finished_at = now()
WHERE id = $1;

-- name: delivery_retry
UPDATE api.webhook_deliveries
SET next_attempt_at = now() + make_interval(secs => $2), last_status = $3, last_error = $4
WHERE id = $1;

-- name: delivery_failed
UPDATE api.webhook_deliveries
SET state = 'failed', last_status = $2, last_error = $3, finished_at = now()
WHERE id = $1;

-- name: disable_webhook
-- The endpoint answered 410 Gone: nothing more is sent to it, what waited is failed.
WITH disabled AS (
    UPDATE api.webhooks SET enabled = false, disabled_reason = $2, updated_at = now()
    WHERE id = $1 RETURNING id)
UPDATE api.webhook_deliveries SET state = 'failed', last_error = $2, finished_at = now()
WHERE webhook_id IN (SELECT id FROM disabled) AND state = 'pending';

-- name: list_deliveries
-- Newest first, each with its attempts (the delivery log).
SELECT d.id, d.event_id, d.event_type, d.state, d.attempts, d.next_attempt_at, d.last_status,
       d.last_error, d.created_at, d.queued_at, d.finished_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                     'at', a.at, 'status', a.status, 'error', a.error, 'duration_ms', a.duration_ms)
                     ORDER BY a.id)
                 FROM api.webhook_attempts a WHERE a.delivery_id = d.id), '[]'::jsonb) AS log
FROM api.webhook_deliveries d
WHERE d.webhook_id = $1 AND ($2::bigint IS NULL OR d.id = $2)
  AND ($3::text IS NULL OR d.state = $3)
ORDER BY d.id DESC
LIMIT $4;

-- name: redeliver
-- Queue a delivery again, now, with a fresh retry schedule; its log is kept.
UPDATE api.webhook_deliveries
SET state = 'pending', attempts = 0, next_attempt_at = now(), queued_at = now(), finished_at = NULL
WHERE id = $1 AND webhook_id = $2
RETURNING id;

-- name: vc_usable
-- Held FOR SHARE by the webhook's transaction, so the VC cannot be deleted under it.
-- Whether $2 may use it (NULL: an admin, who may use every VC).
SELECT ($2::text IS NULL OR v.allowed_groups IS NULL
        OR EXISTS (SELECT 1 FROM api.group_members m WHERE m.username = $2 AND m.group_name = ANY (v.allowed_groups)))
       AS usable
FROM api.virtual_clusters v WHERE v.name = $1 FOR SHARE OF v;
