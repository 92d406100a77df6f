-- 0001 foundation: the schemas, the shared messaging tables, and each service's first tables.
--
-- Why one database with a schema per service: every service writes only its own schema
-- (docs/tables.md lists the owners), while queries across them stay plain SQL joins.
-- The `corral` schema holds what every service appends to: the outbox, the dead
-- letters and the processed-event log of idempotent consumers.

CREATE SCHEMA IF NOT EXISTS corral;
CREATE SCHEMA IF NOT EXISTS api;
CREATE SCHEMA IF NOT EXISTS scheduler;
CREATE SCHEMA IF NOT EXISTS launcher;
CREATE SCHEMA IF NOT EXISTS monitor;
CREATE SCHEMA IF NOT EXISTS alerter;

-- Transactional outbox. A state change and its event commit together; the relay
-- publishes rows to JetStream (Nats-Msg-Id = event_id) and stamps sent_at after the ack.
-- `part` spreads aggregates over relay partitions: one relay at a time owns a
-- partition, so events of one aggregate (one job) are published in commit order.
CREATE TABLE corral.outbox (
    id bigserial PRIMARY KEY,
    event_id text NOT NULL UNIQUE,
    subject text NOT NULL,
    aggregate text NOT NULL,
    part smallint NOT NULL,
    payload bytea NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at timestamptz
);
CREATE INDEX outbox_unsent ON corral.outbox (part, id) WHERE sent_at IS NULL;
CREATE INDEX outbox_sent_at ON corral.outbox (sent_at) WHERE sent_at IS NOT NULL;

-- Messages a consumer could not parse or process for good, with the reason.
CREATE TABLE corral.dead_letters (
    id bigserial PRIMARY KEY,
    consumer text NOT NULL,
    subject text NOT NULL,
    stream_seq bigint,
    reason text NOT NULL,
    payload bytea NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Idempotent consumers record each event they acted on in the same transaction as
-- the effect; a redelivered event finds its row and is acknowledged without effect.
CREATE TABLE corral.processed_events (
    consumer text NOT NULL,
    event_id text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- api: tokens and jobs as submitted. jobs.state is the job's lifecycle state machine;
-- each transition is owned by one service (shared/jobs.py TRANSITIONS, docs/tables.md).
CREATE TABLE api.tokens (
    id text PRIMARY KEY,
    name text NOT NULL,
    sha256 text NOT NULL UNIQUE,
    role text NOT NULL CHECK (role IN ('admin', 'user')),
    username text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

CREATE TABLE api.jobs (
    id text PRIMARY KEY,
    name text NOT NULL,
    username text NOT NULL,
    virtual_cluster text NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    spec jsonb NOT NULL,
    total_gpus integer NOT NULL,
    state text NOT NULL CHECK (state IN
        ('PENDING', 'SCHEDULED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    version integer NOT NULL DEFAULT 1,
    generation integer NOT NULL DEFAULT 0,
    exit_code integer,
    reason text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX jobs_active ON api.jobs (state, created_at)
    WHERE state IN ('PENDING', 'SCHEDULED', 'RUNNING');
CREATE INDEX jobs_created ON api.jobs (created_at DESC);

-- scheduler: one row per placed task instance; released when the job's tasks are done.
CREATE TABLE scheduler.allocations (
    job_id text NOT NULL REFERENCES api.jobs (id),
    generation integer NOT NULL,
    task_role text NOT NULL,
    task_index integer NOT NULL,
    node_id text NOT NULL,
    gpu_indices integer[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    released_at timestamptz,
    PRIMARY KEY (job_id, generation, task_role, task_index)
);
CREATE INDEX allocations_live ON scheduler.allocations (node_id) WHERE released_at IS NULL;

-- launcher: every attempt of every task, kept forever (attempt history).
CREATE TABLE launcher.attempts (
    id text PRIMARY KEY,
    job_id text NOT NULL REFERENCES api.jobs (id),
    generation integer NOT NULL,
    task_role text NOT NULL,
    task_index integer NOT NULL,
    attempt_no integer NOT NULL,
    node_id text NOT NULL,
    gpu_indices integer[] NOT NULL,
    state text NOT NULL CHECK (state IN ('ASSIGNED', 'STARTING', 'RUNNING', 'EXITED', 'LOST')),
    pid integer,
    pid_start_ticks bigint,
    exit_code integer,
    signal integer,
    reason text NOT NULL DEFAULT '',
    log_path text,
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz,
    UNIQUE (job_id, generation, task_role, task_index)
);
-- The "no double launch" invariant, enforced by the database: at most one live
-- attempt per task, ever.
CREATE UNIQUE INDEX attempts_one_live_per_task ON launcher.attempts (job_id, task_role, task_index)
    WHERE state IN ('ASSIGNED', 'STARTING', 'RUNNING');
CREATE INDEX attempts_by_node_live ON launcher.attempts (node_id)
    WHERE state IN ('ASSIGNED', 'STARTING', 'RUNNING');
CREATE INDEX attempts_by_job ON launcher.attempts (job_id);

-- monitor: nodes and their GPUs as the node exporters report them.
CREATE TABLE monitor.nodes (
    id text PRIMARY KEY,
    hostname text NOT NULL,
    simulated boolean NOT NULL,
    state text NOT NULL CHECK (state IN ('READY', 'UNREACHABLE', 'DRAINED')),
    gpu_count integer NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    last_heartbeat timestamptz NOT NULL,
    state_changed_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE monitor.gpus (
    node_id text NOT NULL REFERENCES monitor.nodes (id),
    index integer NOT NULL,
    uuid text NOT NULL,
    model text NOT NULL,
    memory_total_mb integer NOT NULL,
    utilization_pct real,
    memory_used_mb integer,
    temperature_c real,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, index)
);

-- alerter: alerts with their lifecycle.
CREATE TABLE alerter.alerts (
    id text PRIMARY KEY,
    rule text NOT NULL,
    fingerprint text NOT NULL,
    severity text NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    state text NOT NULL CHECK (state IN ('firing', 'acknowledged', 'resolved')),
    summary text NOT NULL,
    labels jsonb NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX alerts_one_open_per_fingerprint ON alerter.alerts (fingerprint)
    WHERE state <> 'resolved';
