-- Webhook subscriptions (Standard Webhooks) and their durable delivery log.
--
-- The API owns webhook subscriptions (DESIGN.md §1). A durable JetStream consumer in the
-- API turns each matching event into one row of api.webhook_deliveries, idempotently
-- (one row per subscription and event id); a delivery loop in the API claims due rows
-- with FOR UPDATE SKIP LOCKED, so any number of API processes share the work and a
-- crash mid-send only means the row is sent again after its lease.

CREATE TABLE api.webhooks (
    id text PRIMARY KEY,
    username text NOT NULL,             -- the owner: a user's webhook sees their jobs' events
    sees_all boolean NOT NULL DEFAULT false,  -- created by an admin: every event, as admins see
    url text NOT NULL,
    event_types text[] NOT NULL CHECK (cardinality(event_types) > 0),
    virtual_cluster text,               -- only events of this VC's jobs; NULL: any
    description text NOT NULL DEFAULT '',
    enabled boolean NOT NULL DEFAULT true,
    disabled_reason text,               -- e.g. the endpoint answered 410 Gone
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_owner ON api.webhooks (username, created_at);

-- Signing secrets, kept in the clear because every delivery is signed with them (an HMAC
-- key cannot be hashed). After a rotation the old secret keeps signing, beside the new
-- one, until expires_at: a receiver has that long to switch.
CREATE TABLE api.webhook_secrets (
    id bigserial PRIMARY KEY,
    webhook_id text NOT NULL REFERENCES api.webhooks (id) ON DELETE CASCADE,
    secret text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz
);
CREATE INDEX webhook_secrets_of ON api.webhook_secrets (webhook_id);

-- One event for one subscription. payload is the CloudEvents document exactly as it was
-- on NATS; attempts counts tries since it was (re)queued and picks the next delay.
CREATE TABLE api.webhook_deliveries (
    id bigserial PRIMARY KEY,
    webhook_id text NOT NULL REFERENCES api.webhooks (id) ON DELETE CASCADE,
    event_id text NOT NULL,
    event_type text NOT NULL,
    payload bytea NOT NULL,
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_status integer,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    queued_at timestamptz NOT NULL DEFAULT now(),   -- creation, or the last manual redelivery
    finished_at timestamptz,
    UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON api.webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_of ON api.webhook_deliveries (webhook_id, id DESC);

-- Every attempt and what the endpoint answered: the delivery log.
CREATE TABLE api.webhook_attempts (
    id bigserial PRIMARY KEY,
    delivery_id bigint NOT NULL REFERENCES api.webhook_deliveries (id) ON DELETE CASCADE,
    at timestamptz NOT NULL DEFAULT now(),
    status integer,                     -- NULL: no answer (timeout, refused connection)
    error text,                         -- NULL: 2xx
    duration_ms integer NOT NULL
);
CREATE INDEX webhook_attempts_of ON api.webhook_attempts (delivery_id, id);
