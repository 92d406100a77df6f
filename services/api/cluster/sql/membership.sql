-- name: insert_join_token
INSERT INTO api.join_tokens (id, secret_sha256, created_by, expires_at)
VALUES ($1, $2, $3, now() + $4) RETURNING expires_at;

-- name: lock_join_token
SELECT secret_sha256, expires_at < now() AS expired, used_at
FROM api.join_tokens WHERE id = $1 FOR UPDATE;

-- name: node_is_up
-- An agent of the node holds a live lease.
SELECT EXISTS (SELECT 1 FROM launcher.agents WHERE node_id = $1 AND lost_at IS NULL
                                           AND lease_expires_at > now());

-- name: spend_join_token
UPDATE api.join_tokens SET used_at = now(), used_by_node = $2 WHERE id = $1;

-- name: upsert_node_bus_user
INSERT INTO api.bus_credentials (user_name, kind, node_id, password_hash, created_by)
VALUES ($1, 'node', $2, $3, $4)
ON CONFLICT (user_name) DO UPDATE SET password_hash = EXCLUDED.password_hash,
    created_by = EXCLUDED.created_by, created_at = now(), revoked_at = NULL;

-- name: node_known
SELECT EXISTS (SELECT 1 FROM launcher.agents WHERE node_id = $1)
    OR EXISTS (SELECT 1 FROM launcher.node_credentials WHERE node_id = $1);

-- name: revoke_node_bus_user
-- A row even for a node of the stack's own (no minted identity): its revocation shuts
-- the stack's own user of that name out too.
INSERT INTO api.bus_credentials (user_name, kind, node_id, password_hash, created_by, revoked_at)
VALUES ($1, 'node', $2, '', $3, now())
ON CONFLICT (user_name) DO UPDATE SET revoked_at = now();

-- name: upsert_integrator
INSERT INTO api.bus_credentials (user_name, kind, streams, password_hash, created_by)
VALUES ($1, 'integrator', $2, $3, $4)
ON CONFLICT (user_name) DO UPDATE SET streams = EXCLUDED.streams,
    password_hash = EXCLUDED.password_hash, created_by = EXCLUDED.created_by, created_at = now(),
    revoked_at = NULL;

-- name: revoke_integrator
UPDATE api.bus_credentials SET revoked_at = now()
WHERE user_name = $1 AND kind = 'integrator' AND revoked_at IS NULL RETURNING 1;
