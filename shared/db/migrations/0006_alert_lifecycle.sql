-- 0006 alert lifecycle: firing -> acknowledged -> resolved, every change with who and when.
--
-- The alerter owns alerts (DESIGN.md §1). An on-call engineer's acknowledge / resolve is
-- recorded by the API as an event and carried out here; a cause that goes away (the node
-- is heard again, an admin undrains it) resolves its alert on its own.

ALTER TABLE alerter.alerts
    ADD COLUMN annotations jsonb NOT NULL DEFAULT '{}',  -- e.g. runbook_url, from the rules file
    ADD COLUMN acknowledged_by text,
    ADD COLUMN acknowledged_at timestamptz,
    ADD COLUMN resolved_by text,
    ADD COLUMN resolved_at timestamptz;

CREATE TABLE alerter.alert_transitions (
    id bigserial PRIMARY KEY,
    alert_id text NOT NULL REFERENCES alerter.alerts (id),
    at timestamptz NOT NULL DEFAULT now(),
    from_state text,  -- NULL: the alert was opened
    to_state text NOT NULL CHECK (to_state IN ('firing', 'acknowledged', 'resolved')),
    actor text NOT NULL,  -- 'alerter' for its own rules, else a user
    note text NOT NULL DEFAULT ''
);
CREATE INDEX alert_transitions_by_alert ON alerter.alert_transitions (alert_id, id);

-- Notifications: one row per (alert, change, receiver), written in the transaction of the
-- change, then delivered with retries. A row is claimed by pushing its next attempt past
-- a lease, so an alerter killed mid-delivery sends it again after restart (a duplicate,
-- never a loss); the unique key keeps a redelivered event from queueing it twice.
CREATE TABLE alerter.notifications (
    id bigserial PRIMARY KEY,
    alert_id text NOT NULL REFERENCES alerter.alerts (id),
    event text NOT NULL CHECK (event IN ('firing', 'acknowledged', 'resolved')),
    receiver text NOT NULL,
    kind text NOT NULL CHECK (kind IN ('webhook', 'slack', 'pagerduty', 'email')),
    url text NOT NULL,
    payload jsonb NOT NULL,
    -- suppressed: never sent, because a silence or an inhibition covered it (last_error says which)
    state text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed', 'suppressed')),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_status integer,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at timestamptz,
    UNIQUE (alert_id, event, receiver)
);
CREATE INDEX notifications_due ON alerter.notifications (next_attempt_at) WHERE state = 'pending';

-- Silences: matchers on alert labels and a time window (a maintenance window is a
-- silence that starts later). An alert a silence covers is still stored and listed; its
-- notifications are suppressed.
CREATE TABLE alerter.silences (
    id text PRIMARY KEY,
    matchers jsonb NOT NULL,  -- [{"name": "node", "op": "=", "value": "gpu-7"}, ...]
    starts_at timestamptz NOT NULL,
    ends_at timestamptz NOT NULL,
    created_by text NOT NULL,
    comment text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    expired_by text,
    CHECK (ends_at > starts_at)
);
CREATE INDEX silences_active ON alerter.silences (ends_at);
