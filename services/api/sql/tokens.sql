-- name: upsert_token
INSERT INTO api.tokens (id, name, sha256, role, username)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO UPDATE SET sha256 = EXCLUDED.sha256, revoked_at = NULL;

-- name: token_by_hash
SELECT id, role, username FROM api.tokens WHERE sha256 = $1 AND revoked_at IS NULL;
