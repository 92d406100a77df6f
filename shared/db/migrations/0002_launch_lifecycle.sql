-- 0002 launch lifecycle: cancel requests, retries with backoff, stop requests, ports,
-- attempt classification, node addresses.
--
-- Why these live where they do: `api.jobs.cancel_requested_at` is the API's (it owns
-- cancel requests); `retries` and `not_before` are the launcher's (it decides retries,
-- the scheduler only honours `not_before`); attempt columns are the launcher's and its
-- node agents'; `monitor.nodes.address` is what tasks use to reach each other.

ALTER TABLE api.jobs
    ADD COLUMN cancel_requested_at timestamptz,
    ADD COLUMN retries integer NOT NULL DEFAULT 0,
    ADD COLUMN not_before timestamptz;

ALTER TABLE launcher.attempts
    ADD COLUMN host text NOT NULL DEFAULT '127.0.0.1',
    ADD COLUMN ports jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN classification text CHECK (classification IN ('transient', 'permanent', 'unknown')),
    ADD COLUMN stop_requested_at timestamptz,
    ADD COLUMN stop_reason text;

ALTER TABLE monitor.nodes
    ADD COLUMN address text NOT NULL DEFAULT '127.0.0.1';
