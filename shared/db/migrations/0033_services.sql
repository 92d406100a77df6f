-- 0033 services: long-running replicas kept behind the API gateway.
--
-- A service is one row (its current template, a kind: service JobSpec, and its revision,
-- bumped by every spec change); each replica is an ordinary job created by the API's
-- service controller through the submission path, linked here. A replica row outlives a
-- replaced job only until the controller cancels it; it goes with its service. The
-- launcher reads the link (a service job restarts instead of ending), the scheduler reads
-- it to protect replicas from batch preemption.

CREATE TABLE api.services (
    name text PRIMARY KEY CHECK (name ~ '^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$'),
    owner text NOT NULL,
    virtual_cluster text NOT NULL,
    revision integer NOT NULL DEFAULT 1 CHECK (revision >= 1),
    spec jsonb NOT NULL,
    replicas integer NOT NULL CHECK (replicas BETWEEN 0 AND 64),
    public boolean NOT NULL DEFAULT false,
    -- Set by DELETE: the controller drains every replica, then removes the row.
    deleting_at timestamptz,
    -- Why the controller cannot create a replica now (the owner's submit is refused: the
    -- VC or an input is no longer theirs to use); '' while it can. Shown in the status.
    blocked_reason text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX services_by_owner ON api.services (owner, name);

CREATE TABLE api.service_replicas (
    job_id text PRIMARY KEY REFERENCES api.jobs (id),
    service text NOT NULL REFERENCES api.services (name) ON DELETE CASCADE,
    revision integer NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Out of the gateway's rotation since; its job is cancelled drain_s later.
    draining_at timestamptz
);
CREATE INDEX service_replicas_by_service ON api.service_replicas (service, created_at);

GRANT SELECT, INSERT, UPDATE, DELETE ON api.services TO corral_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON api.service_replicas TO corral_api;
GRANT SELECT ON api.services TO corral_scheduler, corral_launcher;
GRANT SELECT ON api.service_replicas TO corral_scheduler, corral_launcher;
