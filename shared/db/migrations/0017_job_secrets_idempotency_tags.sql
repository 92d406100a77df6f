-- The jobs REST surface: secrets kept apart from specs, idempotency keys on submit, tags.
--
-- Secrets (an OpenPAI job's `secrets`) never enter api.jobs.spec, an event or a log: the
-- stored command refers to an environment variable, and the value lives here alone,
-- read by the launcher (node agent, Kubernetes runner) when it starts a task. They go
-- with their job (ON DELETE CASCADE).
CREATE TABLE api.job_secrets (
    job_id text NOT NULL REFERENCES api.jobs (id) ON DELETE CASCADE,
    name text NOT NULL CHECK (name ~ '^CORRAL_SECRET_[A-Z0-9_]+$'),
    value text NOT NULL,
    PRIMARY KEY (job_id, name)
);

-- `Idempotency-Key` on submit: per user, the key, a digest of the request (a replay with
-- another body is refused) and the job it created, kept for a bounded time (the API
-- ignores and replaces expired rows, and sweeps them as it goes). The row commits with
-- its job, so a key never points at a job that was not stored (the key is claimed first,
-- to make a concurrent replay wait for it: hence the deferred reference). Only a digest
-- of the request is kept: the request may hold secrets.
CREATE TABLE api.idempotency_keys (
    username text NOT NULL,
    key text NOT NULL,
    request_sha256 text NOT NULL,
    job_id text NOT NULL REFERENCES api.jobs (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (username, key)
);
CREATE INDEX idempotency_keys_created ON api.idempotency_keys (created_at);

-- Tags: a user's own labels on a job (set and replaced through the API), to find jobs by.
ALTER TABLE api.jobs ADD COLUMN tags text[] NOT NULL DEFAULT '{}';
CREATE INDEX jobs_tags ON api.jobs USING gin (tags);
-- A user's own jobs, newest first: what a non-admin's job list reads.
CREATE INDEX jobs_user_created ON api.jobs (username, created_at DESC, id DESC);
