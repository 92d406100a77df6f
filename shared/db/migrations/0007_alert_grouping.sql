-- Alert grouping (group_wait / group_interval / repeat_interval, as Alertmanager has them).
--
-- A notification belongs to a group of its receiver's route (group_key) and is due at
-- next_attempt_at: a group's first message waits group_wait, later ones are batched and
-- sent at most once per group_interval. An alert still firing is sent again after
-- repeat_interval: each repeat is a new round of the same (alert, event, receiver).
ALTER TABLE alerter.notifications
    ADD COLUMN group_key text NOT NULL DEFAULT '',
    ADD COLUMN round integer NOT NULL DEFAULT 0 CHECK (round >= 0),
    DROP CONSTRAINT notifications_alert_id_event_receiver_key,
    ADD CONSTRAINT notifications_once_per_round UNIQUE (alert_id, event, receiver, round);

CREATE INDEX notifications_by_group ON alerter.notifications (receiver, group_key);

-- When each group last reached its receiver: the start of its group_interval.
CREATE TABLE alerter.notification_groups (
    receiver text NOT NULL,
    group_key text NOT NULL,
    last_sent_at timestamptz NOT NULL,
    PRIMARY KEY (receiver, group_key)
);
