-- name: upsert_user
-- The bootstrap admin and tokens made outside the API (tests, scripts): the user exists
-- with this role afterwards.
INSERT INTO api.users (name, role, created_by) VALUES ($1, $2, 'corral')
ON CONFLICT (name) DO UPDATE SET role = EXCLUDED.role;

-- name: upsert_token
INSERT INTO api.tokens (id, name, sha256, username, scopes, created_by)
VALUES ($1, $2, $3, $4, $5, 'corral')
ON CONFLICT (id) DO UPDATE SET sha256 = EXCLUDED.sha256, scopes = EXCLUDED.scopes, revoked_at = NULL,
                               expires_at = NULL;

-- name: token_by_hash
-- With its user's role: the scopes granted are those the user may still hold.
SELECT t.id, t.username, t.scopes, t.expires_at, t.revoked_at, u.role
FROM api.tokens t JOIN api.users u ON u.name = t.username
WHERE t.sha256 = $1;

-- name: insert_token
INSERT INTO api.tokens (id, name, sha256, username, scopes, expires_at, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id, name, username, scopes, created_at, expires_at, revoked_at, created_by;

-- name: list_tokens
-- $1: one user's tokens, or NULL for everyone's (admins). Revoked and expired ones too,
-- for the record; newest first.
SELECT id, name, username, scopes, created_at, expires_at, revoked_at, created_by
FROM api.tokens
WHERE $1::text IS NULL OR username = $1
ORDER BY created_at DESC, id DESC
LIMIT $2;

-- name: revoke_token
-- Returns the hash, so this process can forget the token at once (others within the
-- token cache's few seconds). Revoking twice keeps the first time.
UPDATE api.tokens SET revoked_at = coalesce(revoked_at, now())
WHERE id = $1 AND ($2::text IS NULL OR username = $2)
RETURNING sha256;
