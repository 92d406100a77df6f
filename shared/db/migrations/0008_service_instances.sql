-- Every running service instance beats here (shared/liveness.py): the alerter's
-- ServiceDown rule and GET /api/v1/services read it. A clean stop deletes the row; a
-- crashed instance's row stays, its last_seen_at ageing.
CREATE TABLE corral.service_instances (
    instance_id text PRIMARY KEY,
    service text NOT NULL,
    hostname text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX service_instances_by_service ON corral.service_instances (service, last_seen_at);
