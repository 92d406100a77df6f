-- 0029 interactive: the audit of exec, port-forward and proxy sessions into running tasks,
-- a switch per virtual cluster, and the exec token scope.
--
-- Interactive access goes through the API, never around it (services/api/interactive/):
-- each session is one row here, written when it is asked for and completed when it ends
-- (who, into which task on which node, with which credential, how long, how it ended, the
-- exit code and the bytes each way), so an auditor reads one table. A session's row also
-- carries what its WebSocket needs to open the stream later (the command, the terminal,
-- the port), and the SHA-256 of the credential that asked: the WebSocket must come with
-- the same one, within seconds, once (connected_at is set exactly once).
--
-- exec is a scope of its own, outside the read < submit < admin ladder: running commands
-- in a task is more than submitting one, so a token carries it only when made with it
-- (admin tokens imply it: services/api/tenants/auth.py).

CREATE TABLE api.interactive_sessions (
    id text PRIMARY KEY CHECK (id ~ '^ses_[A-Za-z0-9_-]{32}$'),
    kind text NOT NULL CHECK (kind IN ('exec', 'port-forward', 'proxy')),
    job_id text NOT NULL,
    task_role text NOT NULL,
    task_index integer NOT NULL CHECK (task_index >= 0),
    attempt_id text NOT NULL,
    node_id text NOT NULL,
    username text NOT NULL,
    token_id text NOT NULL,            -- the token's id, or 'portal' for a portal sign-in
    credential_sha256 text NOT NULL CHECK (credential_sha256 ~ '^[0-9a-f]{64}$'),
    command text[] NOT NULL DEFAULT '{}',  -- exec; {} is an interactive shell
    tty boolean NOT NULL DEFAULT true,
    stdin boolean NOT NULL DEFAULT true,
    cols integer NOT NULL DEFAULT 80,
    rows integer NOT NULL DEFAULT 24,
    port_label text NOT NULL DEFAULT '',   -- port-forward and proxy
    port integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    connected_at timestamptz,
    closed_at timestamptz,
    close_reason text,
    exit_code integer,
    bytes_in bigint NOT NULL DEFAULT 0,    -- from the client to the task
    bytes_out bigint NOT NULL DEFAULT 0    -- from the task to the client
);
CREATE INDEX interactive_sessions_by_job ON api.interactive_sessions (job_id, created_at DESC);
CREATE INDEX interactive_sessions_by_user ON api.interactive_sessions (username, created_at DESC);
-- The retention sweep walks the oldest rows first.
CREATE INDEX interactive_sessions_by_age ON api.interactive_sessions (created_at);

GRANT SELECT, INSERT, UPDATE, DELETE ON api.interactive_sessions TO corral_api;

-- On by default: a VC an admin has not decided about lets its jobs' owners in.
ALTER TABLE api.virtual_clusters ADD COLUMN interactive boolean NOT NULL DEFAULT true;

ALTER TABLE api.tokens DROP CONSTRAINT tokens_scopes_check;
ALTER TABLE api.tokens ADD CONSTRAINT tokens_scopes_check
    CHECK (cardinality(scopes) > 0 AND scopes <@ '{read,submit,admin,exec}');
