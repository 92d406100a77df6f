-- 0025 service roles: each service reaches Postgres as its own role, granted only what its
-- SQL uses, and a node agent as a role with no table privileges at all.
--
-- Why: one all-powerful user for every service and every node meant that a stolen node
-- (DESIGN.md §11: less trusted than the control plane) could read every token and rewrite
-- every job. Now each service's role may do what its own statements do (README.md,
-- "Security model"; tests/shared/test_db_roles.py holds the whole table and fails for a
-- table without a decision), and `corral_agent` may only call the `launcher.node_*`
-- functions below. Each takes the node's id and secret, checks the secret against
-- launcher.node_credentials, and then acts for that node's own attempts only. They run
-- as the schema's owner (SECURITY DEFINER) with a pinned search_path, and nobody but
-- `corral_agent` (and the owner) may call them.
--
-- The roles are NOLOGIN groups: `make up` gives each a login and a password of its own;
-- elsewhere the operator gives them logins (or login roles that are members). Roles are
-- cluster-wide and several databases of one cluster may migrate at once (test suites), so
-- each is created only if missing, and one created by another migration meanwhile is
-- not an error. Migrating needs the right to create roles (CREATEROLE), unless they exist.

DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['corral_api', 'corral_scheduler', 'corral_launcher', 'corral_monitor',
                                'corral_alerter', 'corral_agent'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = name) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', name);
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN
                    NULL;  -- another database's migration made it a moment ago
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION 'cannot create the role %: % may not create roles', name, current_user
                        USING ERRCODE = 'insufficient_privilege',
                              HINT = 'create the roles corral_api, corral_scheduler, corral_launcher, '
                                     'corral_monitor, corral_alerter and corral_agent (NOLOGIN) as a '
                                     'superuser once, or give the migrating user CREATEROLE';
            END;
        END IF;
    END LOOP;
END
$$;

-- The node credentials: one secret per node, stored as its SHA-256 (hex). Minted by the
-- owner (make up: shared/db/roles.mint_node_credential), read only by the functions below.
CREATE TABLE launcher.node_credentials (
    node_id text PRIMARY KEY,
    secret_sha256 text NOT NULL CHECK (secret_sha256 ~ '^[0-9a-f]{64}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

-- ---------------------------------------------------------------------------------------
-- Every service: its schema's objects, the outbox (writing and relaying it), dead
-- letters, liveness; the consumers of durable streams also the processed-events records.

GRANT USAGE ON SCHEMA corral TO corral_api, corral_scheduler, corral_launcher, corral_monitor, corral_alerter;
GRANT SELECT, INSERT, UPDATE, DELETE ON corral.outbox
    TO corral_api, corral_scheduler, corral_launcher, corral_monitor, corral_alerter;
GRANT USAGE ON SEQUENCE corral.outbox_id_seq
    TO corral_api, corral_scheduler, corral_launcher, corral_monitor, corral_alerter;
GRANT INSERT ON corral.dead_letters
    TO corral_api, corral_scheduler, corral_launcher, corral_monitor, corral_alerter;
GRANT USAGE ON SEQUENCE corral.dead_letters_id_seq
    TO corral_api, corral_scheduler, corral_launcher, corral_monitor, corral_alerter;
GRANT SELECT, INSERT, UPDATE, DELETE ON corral.service_instances
    TO corral_api, corral_scheduler, corral_launcher, corral_monitor, corral_alerter;
GRANT SELECT, INSERT, DELETE ON corral.processed_events TO corral_launcher, corral_monitor, corral_alerter;

-- api: what people and integrators submit and own; reads the rest for its queries.
GRANT USAGE ON SCHEMA api, scheduler, launcher, monitor, alerter TO corral_api;
GRANT SELECT, INSERT, UPDATE ON api.jobs, api.tokens, api.webhook_deliveries, api.webhook_secrets TO corral_api;
GRANT SELECT, INSERT, UPDATE, DELETE
    ON api.users, api.groups, api.virtual_clusters, api.webhooks, api.idempotency_keys TO corral_api;
GRANT SELECT, INSERT, DELETE ON api.group_members, api.audit_log TO corral_api;
GRANT SELECT, INSERT ON api.job_secrets, api.webhook_attempts TO corral_api;
GRANT USAGE ON SEQUENCE api.audit_log_id_seq, api.webhook_attempts_id_seq, api.webhook_deliveries_id_seq,
    api.webhook_secrets_id_seq TO corral_api;
GRANT SELECT ON scheduler.allocations, scheduler.pending_status, scheduler.queue_positions,
    launcher.attempts, launcher.agents,
    monitor.nodes, monitor.gpus, monitor.gpu_readings, monitor.gpu_status, monitor.gpu_history,
    monitor.health_events,
    alerter.alerts, alerter.alert_transitions, alerter.silences, alerter.rule_overrides, alerter.rules_in_force
    TO corral_api;

-- scheduler: placements, preemptions, reasons, queue order; the PENDING → SCHEDULED step.
GRANT USAGE ON SCHEMA api, scheduler, launcher, monitor TO corral_scheduler;
GRANT SELECT, INSERT, UPDATE ON scheduler.allocations TO corral_scheduler;
GRANT SELECT, INSERT ON scheduler.preemptions TO corral_scheduler;
GRANT SELECT, INSERT, UPDATE, DELETE ON scheduler.pending_status TO corral_scheduler;
GRANT SELECT, INSERT, UPDATE ON scheduler.queue_order TO corral_scheduler;
GRANT SELECT, UPDATE ON api.jobs TO corral_scheduler;
GRANT SELECT ON api.virtual_clusters, launcher.attempts, launcher.agents,
    monitor.nodes, monitor.gpus, monitor.gpu_readings TO corral_scheduler;

-- launcher: attempts and leases (the Kubernetes runner's too); SCHEDULED → RUNNING → ended.
GRANT USAGE ON SCHEMA api, scheduler, launcher, monitor TO corral_launcher;
GRANT SELECT, INSERT, UPDATE ON launcher.attempts, launcher.agents TO corral_launcher;
GRANT SELECT, UPDATE ON api.jobs TO corral_launcher;
GRANT SELECT ON api.job_secrets, scheduler.allocations, scheduler.preemptions, monitor.nodes TO corral_launcher;

-- monitor: nodes, GPUs, readings, health, history; attempts for GPU → job attribution.
GRANT USAGE ON SCHEMA monitor, launcher TO corral_monitor;
GRANT SELECT, INSERT, UPDATE ON monitor.nodes TO corral_monitor;
GRANT SELECT, INSERT, UPDATE, DELETE ON monitor.gpus, monitor.gpu_readings, monitor.gpu_history TO corral_monitor;
GRANT INSERT ON monitor.health_events TO corral_monitor;
GRANT USAGE ON SEQUENCE monitor.health_events_id_seq TO corral_monitor;
GRANT SELECT ON monitor.gpu_status, launcher.attempts TO corral_monitor;

-- alerter: alerts and their lifecycle, silences, rules, notifications.
GRANT USAGE ON SCHEMA alerter, api, scheduler, launcher, monitor TO corral_alerter;
GRANT SELECT, INSERT, UPDATE ON alerter.alerts, alerter.silences, alerter.notifications,
    alerter.notification_groups, alerter.rule_overrides, alerter.rules_in_force TO corral_alerter;
GRANT INSERT ON alerter.alert_transitions TO corral_alerter;
GRANT USAGE ON SEQUENCE alerter.alert_transitions_id_seq, alerter.notifications_id_seq TO corral_alerter;
GRANT SELECT ON api.jobs, launcher.attempts, scheduler.allocations, scheduler.pending_status,
    scheduler.queue_positions, monitor.gpu_history TO corral_alerter;

-- ---------------------------------------------------------------------------------------
-- The node agent: these functions, nothing else. Each checks the caller is the node it
-- names first (``check_node``), then touches only that node's rows.

GRANT USAGE ON SCHEMA launcher TO corral_agent;

-- Whether the caller holds node p_node's secret; raises insufficient_privilege if not.
-- No secret at all is accepted only from a session that may change attempts itself (the
-- owner: tests and tools that run an agent as it): it proves nothing it could not do.
CREATE FUNCTION launcher.check_node(p_node text, p_secret text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_secret IS NULL THEN
        IF has_table_privilege(session_user, 'launcher.attempts', 'UPDATE') THEN
            RETURN;
        END IF;
    ELSIF EXISTS (SELECT FROM launcher.node_credentials c
                  WHERE c.node_id = p_node AND c.revoked_at IS NULL
                    AND c.secret_sha256 = encode(sha256(convert_to(p_secret, 'UTF8')), 'hex')) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION 'not node %: its credential is missing, revoked or not this one', p_node
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'the agent reads its node''s secret from CORRAL_AGENT_NODE_SECRET_FILE';
END
$$;

-- An attempt of node p_node, or insufficient_privilege (whether it exists elsewhere or
-- not at all: the answer is the same).
CREATE FUNCTION launcher.check_node_attempt(p_node text, p_attempt text) RETURNS void
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM launcher.attempts a WHERE a.id = p_attempt AND a.node_id = p_node) THEN
        RAISE EXCEPTION 'attempt % is not one of node %''s', p_attempt, p_node
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$$;

-- An outbox row a node wrote (shared/outbox/rows.outbox_row) is about what it says it is:
-- the event type and NATS subject expected, the entity (the envelope's subject), the
-- job as aggregate, the data fields given (p_data: containment), the envelope's id as the
-- row's, the node agent as its source, no header but traceparent, and a partition that
-- the launcher's relay publishes (shared/outbox/rows.py: the launcher's block of
-- PUBLISHERS), so no other service's relay is handed an event it may not publish.
CREATE FUNCTION launcher.check_node_event(
    p_node text, p_event_id text, p_subject text, p_aggregate text, p_part smallint, p_payload bytea,
    p_headers jsonb, p_type text, p_expected_subject text, p_entity text, p_job text, p_data jsonb
) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    event jsonb := convert_from(p_payload, 'UTF8')::jsonb;
BEGIN
    IF p_subject IS DISTINCT FROM p_expected_subject
       OR event->>'type' IS DISTINCT FROM p_type
       OR event->>'id' IS DISTINCT FROM p_event_id
       OR event->>'source' IS DISTINCT FROM 'corral/agent'
       OR event->>'subject' IS DISTINCT FROM p_entity
       OR p_aggregate IS DISTINCT FROM p_job
       OR NOT coalesce(event->'data' @> p_data, false)
       OR p_part IS NULL OR p_part NOT BETWEEN 32 AND 47
       OR jsonb_typeof(p_headers) IS DISTINCT FROM 'object'
       OR EXISTS (SELECT FROM jsonb_object_keys(p_headers) AS k WHERE k <> 'traceparent') THEN
        RAISE EXCEPTION 'node % may not write this event (%): only % about its own attempt', p_node,
                        p_subject, p_type
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$$;

CREATE FUNCTION launcher.node_register(
    p_node text, p_secret text, p_lease_s double precision, p_isolation text, p_isolation_detail text,
    p_machine_cpus integer
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    new_epoch bigint;
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    -- A (re)starting agent takes a new epoch: whatever an earlier incarnation held is fenced.
    INSERT INTO launcher.agents AS g (node_id, epoch, lease_expires_at, isolation, isolation_detail, machine_cpus)
    VALUES (p_node, 1, now() + make_interval(secs => p_lease_s), p_isolation, p_isolation_detail, p_machine_cpus)
    ON CONFLICT (node_id) DO UPDATE
    SET epoch = g.epoch + 1, lease_expires_at = EXCLUDED.lease_expires_at,
        lost_at = NULL, registered_at = now(), isolation = EXCLUDED.isolation,
        isolation_detail = EXCLUDED.isolation_detail, machine_cpus = EXCLUDED.machine_cpus
    RETURNING g.epoch INTO new_epoch;
    RETURN new_epoch;
END
$$;

-- The epoch, or NULL when the lease was lost (the node was declared lost meanwhile).
CREATE FUNCTION launcher.node_renew_lease(p_node text, p_secret text, p_epoch bigint, p_lease_s double precision)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    renewed bigint;
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    UPDATE launcher.agents g SET lease_expires_at = now() + make_interval(secs => p_lease_s)
    WHERE g.node_id = p_node AND g.epoch = p_epoch AND g.lost_at IS NULL
    RETURNING g.epoch INTO renewed;
    RETURN renewed;
END
$$;

-- services/launcher/sql/agent.sql's claim_attempt, for one of the node's own attempts:
-- ASSIGNED → STARTING only by the agent holding the node's live lease (epoch), only while
-- nobody asked to stop it or its job; what the task needs to start, its job's secrets
-- among them. No row: not to be started (already claimed, stopped, its job moved on).
CREATE FUNCTION launcher.node_claim_attempt(p_node text, p_secret text, p_attempt text, p_epoch bigint)
RETURNS TABLE (
    id text, job_id text, generation integer, task_role text, task_index integer, attempt_no integer,
    gpu_indices integer[], spec jsonb, traceparent text, username text, secrets jsonb, peers jsonb
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    PERFORM launcher.check_node_attempt(p_node, p_attempt);
    RETURN QUERY
    UPDATE launcher.attempts a SET state = 'STARTING'
    FROM api.jobs j
    WHERE a.id = p_attempt AND a.node_id = p_node AND a.state = 'ASSIGNED' AND a.stop_requested_at IS NULL
      AND EXISTS (SELECT FROM launcher.agents g WHERE g.node_id = p_node AND g.epoch = p_epoch
                  AND g.lost_at IS NULL AND g.lease_expires_at > now())
      AND j.id = a.job_id AND j.generation = a.generation AND j.state IN ('SCHEDULED', 'RUNNING')
      AND j.cancel_requested_at IS NULL
    RETURNING a.id, a.job_id, a.generation, a.task_role, a.task_index, a.attempt_no, a.gpu_indices, j.spec,
              j.traceparent, j.username,
              (SELECT coalesce(jsonb_object_agg(s.name, s.value), '{}'::jsonb)
               FROM api.job_secrets s WHERE s.job_id = j.id),
              (SELECT jsonb_agg(jsonb_build_object('task_role', p.task_role, 'task_index', p.task_index,
                                                   'node_id', p.node_id, 'host', p.host, 'ports', p.ports))
               FROM launcher.attempts p WHERE p.job_id = a.job_id AND p.generation = a.generation);
END
$$;

-- agent.sql's mark_attempt_running and job_running_with_its_first_task in one call: the
-- attempt STARTING → RUNNING and its task.started (p_started_*); for the job's first task
-- to run, the job SCHEDULED → RUNNING and its job.running (p_running_*). The job's row
-- is locked first, as the launcher locks a job before its attempts. One row when the
-- attempt was marked (job_running: the job too, with how long it was SCHEDULED and its
-- age), none when it was not this node's to start any more.
CREATE FUNCTION launcher.node_mark_running(
    p_node text, p_secret text, p_attempt text, p_pid integer, p_pid_start_ticks bigint, p_log_path text,
    p_started_id text, p_started_subject text, p_started_aggregate text, p_started_part smallint,
    p_started_payload bytea, p_started_headers jsonb,
    p_running_id text, p_running_subject text, p_running_aggregate text, p_running_part smallint,
    p_running_payload bytea, p_running_headers jsonb
) RETURNS TABLE (job_running boolean, in_state_s double precision, age_s double precision)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    job api.jobs%ROWTYPE;
    attempt_generation integer;
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    PERFORM launcher.check_node_attempt(p_node, p_attempt);
    SELECT j.* INTO job FROM api.jobs j JOIN launcher.attempts x ON x.job_id = j.id
    WHERE x.id = p_attempt FOR NO KEY UPDATE OF j;
    UPDATE launcher.attempts a
    SET state = 'RUNNING', pid = p_pid, pid_start_ticks = p_pid_start_ticks,
        log_path = coalesce(p_log_path, a.log_path), started_at = now()
    WHERE a.id = p_attempt AND a.node_id = p_node AND a.state = 'STARTING'
    RETURNING a.generation INTO attempt_generation;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM launcher.check_node_event(
        p_node, p_started_id, p_started_subject, p_started_aggregate, p_started_part, p_started_payload,
        p_started_headers, 'corral.task.started.v1', 'corral.task.started.' || p_node, p_attempt, job.id,
        jsonb_build_object('attempt_id', p_attempt, 'node_id', p_node, 'job_id', job.id));
    INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
    VALUES (p_started_id, p_started_subject, p_started_aggregate, p_started_part, p_started_payload,
            p_started_headers);
    PERFORM pg_notify('corral_outbox_agent', p_started_part::text);
    UPDATE api.jobs j SET state = 'RUNNING', version = j.version + 1, updated_at = now()
    WHERE j.id = job.id AND j.generation = attempt_generation AND j.state = 'SCHEDULED';
    IF NOT FOUND THEN
        RETURN QUERY SELECT false, NULL::double precision, NULL::double precision;
        RETURN;
    END IF;
    PERFORM launcher.check_node_event(
        p_node, p_running_id, p_running_subject, p_running_aggregate, p_running_part, p_running_payload,
        p_running_headers, 'corral.job.running.v1', 'corral.job.running.' || job.id, job.id, job.id,
        jsonb_build_object('job_id', job.id, 'generation', attempt_generation));
    INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
    VALUES (p_running_id, p_running_subject, p_running_aggregate, p_running_part, p_running_payload,
            p_running_headers);
    PERFORM pg_notify('corral_outbox_agent', p_running_part::text);
    RETURN QUERY SELECT true, extract(epoch FROM clock_timestamp() - job.updated_at)::double precision,
                        extract(epoch FROM clock_timestamp() - job.created_at)::double precision;
END
$$;

-- agent.sql's mark_attempt_exited: the attempt's end (p_state EXITED or LOST) and its
-- task.exited, only while the node runs it (STARTING or RUNNING). The launcher decides
-- the job at once: it listens on corral_attempt_ended (services/launcher/attempt_ends.py),
-- whose payload is the job's id and, after a space, the event's traceparent (the
-- decision joins the task's trace). The job's id, or NULL when it was not this node's to
-- report any more.
CREATE FUNCTION launcher.node_mark_exited(
    p_node text, p_secret text, p_attempt text, p_state text, p_exit_code integer, p_signal integer,
    p_reason text, p_classification text,
    p_event_id text, p_subject text, p_aggregate text, p_part smallint, p_payload bytea, p_headers jsonb
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ended_job text;
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    PERFORM launcher.check_node_attempt(p_node, p_attempt);
    IF p_state IS NULL OR p_state NOT IN ('EXITED', 'LOST') THEN
        RAISE EXCEPTION 'an attempt ends EXITED or LOST, not %', p_state USING ERRCODE = 'check_violation';
    END IF;
    UPDATE launcher.attempts a
    SET state = p_state, exit_code = p_exit_code, signal = p_signal, reason = p_reason,
        classification = p_classification, finished_at = now()
    WHERE a.id = p_attempt AND a.node_id = p_node AND a.state IN ('STARTING', 'RUNNING')
    RETURNING a.job_id INTO ended_job;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM launcher.check_node_event(
        p_node, p_event_id, p_subject, p_aggregate, p_part, p_payload, p_headers,
        'corral.task.exited.v1', 'corral.task.exited.' || p_node, p_attempt, ended_job,
        jsonb_build_object('attempt_id', p_attempt, 'node_id', p_node, 'job_id', ended_job));
    INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
    VALUES (p_event_id, p_subject, p_aggregate, p_part, p_payload, p_headers);
    PERFORM pg_notify('corral_outbox_agent', p_part::text);
    PERFORM pg_notify('corral_attempt_ended', concat_ws(' ', ended_job, p_headers->>'traceparent'));
    RETURN ended_job;
END
$$;

-- agent.sql's live_attempts_on_node, for the node's own.
CREATE FUNCTION launcher.node_live_attempts(p_node text, p_secret text)
RETURNS TABLE (
    id text, job_id text, generation integer, state text, pid integer, pid_start_ticks bigint, log_path text,
    task_role text, task_index integer, attempt_no integer, stop_requested_at timestamptz, stop_reason text,
    stop_platform text, spec jsonb
)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    RETURN QUERY
    SELECT a.id, a.job_id, a.generation, a.state, a.pid, a.pid_start_ticks, a.log_path, a.task_role,
           a.task_index, a.attempt_no, a.stop_requested_at, a.stop_reason, a.stop_platform, j.spec
    FROM launcher.attempts a JOIN api.jobs j ON j.id = a.job_id
    WHERE a.node_id = p_node AND a.state IN ('ASSIGNED', 'STARTING', 'RUNNING');
END
$$;

-- agent.sql's attempt_states: of these attempts, the node's own (others are left out).
CREATE FUNCTION launcher.node_attempt_states(p_node text, p_secret text, p_attempts text[])
RETURNS TABLE (id text, state text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    RETURN QUERY SELECT a.id, a.state FROM launcher.attempts a WHERE a.id = ANY(p_attempts) AND a.node_id = p_node;
END
$$;

-- services/launcher/sql/logs.sql's expired_task_logs, for the node's own attempts: of
-- the log files it found, those whose attempt ended more than p_older_than_s ago.
CREATE FUNCTION launcher.node_expired_task_logs(
    p_node text, p_secret text, p_jobs text[], p_roles text[], p_indexes integer[], p_attempt_nos integer[],
    p_older_than_s double precision
) RETURNS TABLE (ord bigint, job_ended boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    RETURN QUERY
    SELECT f.ord, j.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
    FROM unnest(p_jobs, p_roles, p_indexes, p_attempt_nos) WITH ORDINALITY
         AS f(job_id, task_role, task_index, attempt_no, ord)
    JOIN launcher.attempts a ON a.job_id = f.job_id AND a.task_role = f.task_role
         AND a.task_index = f.task_index AND a.attempt_no = f.attempt_no
    JOIN api.jobs j ON j.id = a.job_id
    WHERE a.node_id = p_node AND a.state IN ('EXITED', 'LOST')
      AND a.finished_at < now() - make_interval(secs => p_older_than_s);
END
$$;

-- shared/deadletters.py, for the node's own consumers (durables named agent-<node>...).
CREATE FUNCTION launcher.node_record_dead_letter(
    p_node text, p_secret text, p_consumer text, p_subject text, p_stream_seq bigint, p_reason text,
    p_payload bytea, p_headers jsonb
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    IF NOT starts_with(p_consumer, 'agent-' || p_node) THEN
        RAISE EXCEPTION 'consumer % is not one of node %''s', p_consumer, p_node
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO corral.dead_letters (consumer, subject, stream_seq, reason, payload, headers)
    VALUES (p_consumer, p_subject, p_stream_seq, left(p_reason, 4000), p_payload, p_headers);
END
$$;

-- shared/liveness.py's beat and goodbye, for the node's agent (service agent-<node>).
CREATE FUNCTION launcher.node_beat(p_node text, p_secret text, p_instance text, p_hostname text, p_pid integer)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    IF NOT starts_with(p_instance, 'agent-' || p_node || '@') THEN
        RAISE EXCEPTION 'instance % is not node %''s agent', p_instance, p_node
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO corral.service_instances AS s (instance_id, service, hostname, pid)
    VALUES (p_instance, 'agent-' || p_node, p_hostname, p_pid)
    ON CONFLICT (instance_id) DO UPDATE SET last_seen_at = now();
END
$$;

CREATE FUNCTION launcher.node_goodbye(p_node text, p_secret text, p_instance text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    DELETE FROM corral.service_instances s WHERE s.instance_id = p_instance AND s.service = 'agent-' || p_node;
END
$$;

REVOKE EXECUTE ON FUNCTION
    launcher.check_node(text, text),
    launcher.check_node_attempt(text, text),
    launcher.check_node_event(text, text, text, text, smallint, bytea, jsonb, text, text, text, text, jsonb),
    launcher.node_register(text, text, double precision, text, text, integer),
    launcher.node_renew_lease(text, text, bigint, double precision),
    launcher.node_claim_attempt(text, text, text, bigint),
    launcher.node_mark_running(text, text, text, integer, bigint, text, text, text, text, smallint, bytea, jsonb,
                               text, text, text, smallint, bytea, jsonb),
    launcher.node_mark_exited(text, text, text, text, integer, integer, text, text, text, text, text, smallint,
                              bytea, jsonb),
    launcher.node_live_attempts(text, text),
    launcher.node_attempt_states(text, text, text[]),
    launcher.node_expired_task_logs(text, text, text[], text[], integer[], integer[], double precision),
    launcher.node_record_dead_letter(text, text, text, text, bigint, text, bytea, jsonb),
    launcher.node_beat(text, text, text, text, integer),
    launcher.node_goodbye(text, text, text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    launcher.node_register(text, text, double precision, text, text, integer),
    launcher.node_renew_lease(text, text, bigint, double precision),
    launcher.node_claim_attempt(text, text, text, bigint),
    launcher.node_mark_running(text, text, text, integer, bigint, text, text, text, text, smallint, bytea, jsonb,
                               text, text, text, smallint, bytea, jsonb),
    launcher.node_mark_exited(text, text, text, text, integer, integer, text, text, text, text, text, smallint,
                              bytea, jsonb),
    launcher.node_live_attempts(text, text),
    launcher.node_attempt_states(text, text, text[]),
    launcher.node_expired_task_logs(text, text, text[], text[], integer[], integer[], double precision),
    launcher.node_record_dead_letter(text, text, text, text, bigint, text, bytea, jsonb),
    launcher.node_beat(text, text, text, text, integer),
    launcher.node_goodbye(text, text, text)
TO corral_agent;
