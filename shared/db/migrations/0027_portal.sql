-- 0027 portal: the web portal's sign-in sessions, and the indexes its job list pages by.
--
-- Signing in exchanges a bearer token once for a session (services/api/portal/session.py):
-- the browser holds a random session secret in an HttpOnly cookie, and this table its
-- SHA-256 and the SHA-256 of the token it stands for, never either in the clear. Every
-- request verifies that token again (revoked, expired, demoted), so a session can never
-- outlive or outrank its token.

CREATE TABLE api.portal_sessions (
    secret_sha256 text PRIMARY KEY CHECK (secret_sha256 ~ '^[0-9a-f]{64}$'),
    token_sha256 text NOT NULL CHECK (token_sha256 ~ '^[0-9a-f]{64}$'),
    username text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX portal_sessions_expiry ON api.portal_sessions (expires_at);

GRANT SELECT, INSERT, DELETE ON api.portal_sessions TO corral_api;

-- The portal's job list is keyset-paged newest first, on (created_at, id), filtered by
-- state, VC or user: each filter has an index in that order, so a page is an index range
-- scan that stops after one page whatever the table holds (jobs_user_created already
-- serves the user filter).
CREATE INDEX jobs_newest_first ON api.jobs (created_at DESC, id DESC);
DROP INDEX api.jobs_created;  -- the one above serves all it served
CREATE INDEX jobs_state_newest_first ON api.jobs (state, created_at DESC, id DESC);
CREATE INDEX jobs_vc_newest_first ON api.jobs (virtual_cluster, created_at DESC, id DESC);
