-- name: insert_session
INSERT INTO api.portal_sessions (secret_sha256, token_sha256, username, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4));

-- name: session_by_secret
-- A session still in force: its token is checked again by the caller.
SELECT token_sha256, username, expires_at FROM api.portal_sessions
WHERE secret_sha256 = $1 AND expires_at > now();

-- name: delete_session
DELETE FROM api.portal_sessions WHERE secret_sha256 = $1;

-- name: forget_expired_sessions
DELETE FROM api.portal_sessions WHERE expires_at <= now();
