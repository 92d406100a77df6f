CREATE SCHEMA alerter;
CREATE SCHEMA api;
CREATE SCHEMA corral;
CREATE SCHEMA launcher;
CREATE SCHEMA monitor;
CREATE SCHEMA scheduler;
CREATE FUNCTION launcher.check_node(p_node text, p_secret text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
CREATE FUNCTION launcher.check_node_attempt(p_node text, p_attempt text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NOT EXISTS (SELECT FROM launcher.attempts a WHERE a.id = p_attempt AND a.node_id = p_node) THEN
        RAISE EXCEPTION 'attempt % is not one of node %''s', p_attempt, p_node
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END
$$;
CREATE FUNCTION launcher.check_node_event(p_node text, p_event_id text, p_subject text, p_aggregate text, p_part smallint, p_payload bytea, p_headers jsonb, p_type text, p_expected_subject text, p_entity text, p_job text, p_data jsonb) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
CREATE FUNCTION launcher.node_attempt_ssh(p_node text, p_secret text, p_attempt text) RETURNS TABLE(user_private_key text, user_public_key text, host_private_key text, host_public_key text, authorized_keys text[])
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    PERFORM launcher.check_node_attempt(p_node, p_attempt);
    RETURN QUERY
    SELECT
        -- (without between_tasks no task logs in to another: it gets no user key)
        CASE WHEN coalesce((j.spec -> 'ssh' ->> 'between_tasks')::boolean, true)
             THEN k.user_private_key END,
        k.user_public_key, k.host_private_key, k.host_public_key,
        ARRAY(
            SELECT given.key
            FROM jsonb_array_elements_text(coalesce(j.spec -> 'ssh' -> 'authorized_keys', '[]'::jsonb))
                 AS given(key)
            UNION ALL
            SELECT u.public_key
            FROM jsonb_array_elements_text(coalesce(j.spec -> 'ssh' -> 'user_keys', '[]'::jsonb))
                 AS named(name)
            JOIN api.user_ssh_keys u ON u.username = j.username AND u.name = named.name
        )
    FROM launcher.attempts a
    JOIN api.jobs j ON j.id = a.job_id AND j.generation = a.generation
    JOIN launcher.job_ssh_keys k ON k.job_id = a.job_id AND k.generation = a.generation
    WHERE a.id = p_attempt AND a.node_id = p_node AND a.state = 'STARTING'
      AND jsonb_typeof(j.spec -> 'ssh') = 'object'
      AND coalesce(j.spec ->> 'framework', 'generic') = 'generic';
END
$$;
CREATE FUNCTION launcher.node_attempt_states(p_node text, p_secret text, p_attempts text[]) RETURNS TABLE(id text, state text)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    RETURN QUERY SELECT a.id, a.state FROM launcher.attempts a WHERE a.id = ANY(p_attempts) AND a.node_id = p_node;
END
$$;
CREATE FUNCTION launcher.node_attempt_storage(p_node text, p_secret text, p_attempt text) RETURNS TABLE(name text, kind text, source text, read_only boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    PERFORM launcher.check_node_attempt(p_node, p_attempt);
    RETURN QUERY
    SELECT c.name, c.kind, c.source, c.read_only
    FROM launcher.attempts a
    JOIN api.jobs j ON j.id = a.job_id AND j.generation = a.generation
    CROSS JOIN LATERAL jsonb_array_elements(coalesce(j.spec -> 'storage', '[]'::jsonb)) AS u(item)
    JOIN api.storage_configs c ON c.name = u.item ->> 'name'
    WHERE a.id = p_attempt AND a.node_id = p_node AND a.state = 'STARTING'
    ORDER BY c.name;
END
$$;
CREATE FUNCTION launcher.node_beat(p_node text, p_secret text, p_instance text, p_hostname text, p_pid integer) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
CREATE FUNCTION launcher.node_claim_attempt(p_node text, p_secret text, p_attempt text, p_epoch bigint) RETURNS TABLE(id text, job_id text, generation integer, task_role text, task_index integer, attempt_no integer, gpu_indices integer[], spec jsonb, traceparent text, username text, secrets jsonb, peers jsonb, ssh_keys jsonb)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
               FROM launcher.attempts p WHERE p.job_id = a.job_id AND p.generation = a.generation),
              (SELECT jsonb_build_object(
                          'user_private_key', CASE WHEN a.task_role = 'launcher' THEN k.user_private_key END,
                          'user_public_key', k.user_public_key,
                          'host_private_key', CASE WHEN a.task_role = 'worker' THEN k.host_private_key END,
                          'host_public_key', k.host_public_key)
               FROM launcher.job_ssh_keys k WHERE k.job_id = a.job_id AND k.generation = a.generation);
END
$$;
CREATE FUNCTION launcher.node_expired_task_logs(p_node text, p_secret text, p_jobs text[], p_roles text[], p_indexes integer[], p_attempt_nos integer[], p_older_than_s double precision) RETURNS TABLE(ord bigint, job_ended boolean)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
CREATE FUNCTION launcher.node_goodbye(p_node text, p_secret text, p_instance text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    DELETE FROM corral.service_instances s WHERE s.instance_id = p_instance AND s.service = 'agent-' || p_node;
END
$$;
CREATE FUNCTION launcher.node_live_attempts(p_node text, p_secret text) RETURNS TABLE(id text, job_id text, generation integer, state text, pid integer, pid_start_ticks bigint, log_path text, task_role text, task_index integer, attempt_no integer, stop_requested_at timestamp with time zone, stop_reason text, stop_platform text, spec jsonb, ports jsonb, gpu_indices integer[])
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    RETURN QUERY
    SELECT a.id, a.job_id, a.generation, a.state, a.pid, a.pid_start_ticks, a.log_path, a.task_role,
           a.task_index, a.attempt_no, a.stop_requested_at, a.stop_reason, a.stop_platform, j.spec, a.ports,
           a.gpu_indices
    FROM launcher.attempts a JOIN api.jobs j ON j.id = a.job_id
    WHERE a.node_id = p_node AND a.state IN ('ASSIGNED', 'STARTING', 'RUNNING');
END
$$;
CREATE FUNCTION launcher.node_mark_exited(p_node text, p_secret text, p_attempt text, p_state text, p_exit_code integer, p_signal integer, p_reason text, p_classification text, p_event_id text, p_subject text, p_aggregate text, p_part smallint, p_payload bytea, p_headers jsonb) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
CREATE FUNCTION launcher.node_mark_running(p_node text, p_secret text, p_attempt text, p_pid integer, p_pid_start_ticks bigint, p_log_path text, p_started_id text, p_started_subject text, p_started_aggregate text, p_started_part smallint, p_started_payload bytea, p_started_headers jsonb, p_running_id text, p_running_subject text, p_running_aggregate text, p_running_part smallint, p_running_payload bytea, p_running_headers jsonb) RETURNS TABLE(job_running boolean, in_state_s double precision, age_s double precision)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
CREATE FUNCTION launcher.node_record_dead_letter(p_node text, p_secret text, p_consumer text, p_subject text, p_stream_seq bigint, p_reason text, p_payload bytea, p_headers jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
CREATE FUNCTION launcher.node_record_gpu_use(p_node text, p_secret text, p_attempts text[], p_used_mb integer[]) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    changed integer;
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    IF cardinality(p_attempts) IS DISTINCT FROM cardinality(p_used_mb) THEN
        RAISE EXCEPTION 'one use per attempt' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE launcher.attempts a
    SET gpu_memory_used_mb = u.used_mb, gpu_memory_read_at = now()
    FROM unnest(p_attempts, p_used_mb) AS u(attempt_id, used_mb)
    WHERE a.id = u.attempt_id AND a.node_id = p_node AND a.state = 'RUNNING' AND u.used_mb >= 0;
    GET DIAGNOSTICS changed = ROW_COUNT;
    RETURN changed;
END
$$;
CREATE FUNCTION launcher.node_register(p_node text, p_secret text, p_lease_s double precision, p_isolation text, p_isolation_detail text, p_machine_cpus integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
CREATE FUNCTION launcher.node_renew_lease(p_node text, p_secret text, p_epoch bigint, p_lease_s double precision) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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
CREATE FUNCTION launcher.node_report_over_limit(p_node text, p_secret text, p_attempt text, p_event_id text, p_subject text, p_aggregate text, p_part smallint, p_payload bytea, p_headers jsonb) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    its_job text;
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    PERFORM launcher.check_node_attempt(p_node, p_attempt);
    SELECT a.job_id INTO its_job FROM launcher.attempts a
    WHERE a.id = p_attempt AND a.node_id = p_node AND a.state = 'RUNNING';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM launcher.check_node_event(
        p_node, p_event_id, p_subject, p_aggregate, p_part, p_payload, p_headers,
        'corral.task.over_limit.v1', 'corral.task.over_limit.' || p_node, p_attempt, its_job,
        jsonb_build_object('attempt_id', p_attempt, 'node_id', p_node, 'job_id', its_job));
    INSERT INTO corral.outbox (event_id, subject, aggregate, part, payload, headers)
    VALUES (p_event_id, p_subject, p_aggregate, p_part, p_payload, p_headers);
    PERFORM pg_notify('corral_outbox_agent', p_part::text);
    RETURN true;
END
$$;
CREATE FUNCTION launcher.node_set_readiness(p_node text, p_secret text, p_attempt text, p_ready boolean, p_detail text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    PERFORM launcher.check_node_attempt(p_node, p_attempt);
    UPDATE launcher.attempts
    SET ready = p_ready, ready_detail = left(coalesce(p_detail, ''), 500), ready_changed_at = now()
    WHERE id = p_attempt AND node_id = p_node AND state = 'RUNNING';
    RETURN FOUND;
END
$$;
CREATE TABLE alerter.alert_transitions (
    id bigint NOT NULL,
    alert_id text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    from_state text,
    to_state text NOT NULL,
    actor text NOT NULL,
    note text DEFAULT ''::text NOT NULL,
    CONSTRAINT alert_transitions_to_state_check CHECK ((to_state = ANY (ARRAY['firing'::text, 'acknowledged'::text, 'resolved'::text])))
);
CREATE SEQUENCE alerter.alert_transitions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE alerter.alert_transitions_id_seq OWNED BY alerter.alert_transitions.id;
CREATE TABLE alerter.alerts (
    id text NOT NULL,
    rule text NOT NULL,
    fingerprint text NOT NULL,
    severity text NOT NULL,
    state text NOT NULL,
    summary text NOT NULL,
    labels jsonb NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    annotations jsonb DEFAULT '{}'::jsonb NOT NULL,
    acknowledged_by text,
    acknowledged_at timestamp with time zone,
    resolved_by text,
    resolved_at timestamp with time zone,
    CONSTRAINT alerts_severity_check CHECK ((severity = ANY (ARRAY['info'::text, 'warning'::text, 'critical'::text]))),
    CONSTRAINT alerts_state_check CHECK ((state = ANY (ARRAY['firing'::text, 'acknowledged'::text, 'resolved'::text])))
);
CREATE TABLE alerter.notification_groups (
    receiver text NOT NULL,
    group_key text NOT NULL,
    last_sent_at timestamp with time zone NOT NULL
);
CREATE TABLE alerter.notifications (
    id bigint NOT NULL,
    alert_id text NOT NULL,
    event text NOT NULL,
    receiver text NOT NULL,
    kind text NOT NULL,
    url text NOT NULL,
    payload jsonb NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    last_status integer,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone,
    group_key text DEFAULT ''::text NOT NULL,
    round integer DEFAULT 0 NOT NULL,
    CONSTRAINT notifications_event_check CHECK ((event = ANY (ARRAY['firing'::text, 'acknowledged'::text, 'resolved'::text]))),
    CONSTRAINT notifications_kind_check CHECK ((kind = ANY (ARRAY['webhook'::text, 'slack'::text, 'pagerduty'::text, 'email'::text]))),
    CONSTRAINT notifications_round_check CHECK ((round >= 0)),
    CONSTRAINT notifications_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'sent'::text, 'failed'::text, 'suppressed'::text])))
);
CREATE SEQUENCE alerter.notifications_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE alerter.notifications_id_seq OWNED BY alerter.notifications.id;
CREATE TABLE alerter.rule_overrides (
    singleton boolean DEFAULT true NOT NULL,
    overrides jsonb NOT NULL,
    version integer NOT NULL,
    updated_by text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT rule_overrides_singleton_check CHECK (singleton)
);
CREATE TABLE alerter.rules_in_force (
    singleton boolean DEFAULT true NOT NULL,
    rules jsonb NOT NULL,
    file text,
    problem text,
    overrides_version integer NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT rules_in_force_singleton_check CHECK (singleton)
);
CREATE TABLE alerter.silences (
    id text NOT NULL,
    matchers jsonb NOT NULL,
    starts_at timestamp with time zone NOT NULL,
    ends_at timestamp with time zone NOT NULL,
    created_by text NOT NULL,
    comment text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expired_by text,
    CONSTRAINT silences_check CHECK ((ends_at > starts_at))
);
CREATE TABLE api.audit_log (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    username text,
    token_id text,
    method text NOT NULL,
    route text NOT NULL,
    target text,
    status smallint NOT NULL,
    client text
);
CREATE SEQUENCE api.audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE api.audit_log_id_seq OWNED BY api.audit_log.id;
CREATE TABLE api.bus_credentials (
    user_name text NOT NULL,
    kind text NOT NULL,
    node_id text,
    streams text[] DEFAULT '{}'::text[] NOT NULL,
    password_hash text NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    CONSTRAINT bus_credentials_check CHECK (((kind = 'node'::text) = (node_id IS NOT NULL))),
    CONSTRAINT bus_credentials_kind_check CHECK ((kind = ANY (ARRAY['node'::text, 'integrator'::text])))
);
CREATE TABLE api.group_members (
    group_name text NOT NULL,
    username text NOT NULL,
    added_at timestamp with time zone DEFAULT now() NOT NULL,
    added_by text NOT NULL
);
CREATE TABLE api.groups (
    name text NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text NOT NULL
);
CREATE TABLE api.idempotency_keys (
    username text NOT NULL,
    key text NOT NULL,
    request_sha256 text NOT NULL,
    job_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);
CREATE TABLE api.interactive_sessions (
    id text NOT NULL,
    kind text NOT NULL,
    job_id text NOT NULL,
    task_role text NOT NULL,
    task_index integer NOT NULL,
    attempt_id text NOT NULL,
    node_id text NOT NULL,
    username text NOT NULL,
    token_id text NOT NULL,
    credential_sha256 text NOT NULL,
    command text[] DEFAULT '{}'::text[] NOT NULL,
    tty boolean DEFAULT true NOT NULL,
    stdin boolean DEFAULT true NOT NULL,
    cols integer DEFAULT 80 NOT NULL,
    rows integer DEFAULT 24 NOT NULL,
    port_label text DEFAULT ''::text NOT NULL,
    port integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    connected_at timestamp with time zone,
    closed_at timestamp with time zone,
    close_reason text,
    exit_code integer,
    bytes_in bigint DEFAULT 0 NOT NULL,
    bytes_out bigint DEFAULT 0 NOT NULL,
    CONSTRAINT interactive_sessions_credential_sha256_check CHECK ((credential_sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT interactive_sessions_id_check CHECK ((id ~ '^ses_[A-Za-z0-9_-]{32}$'::text)),
    CONSTRAINT interactive_sessions_kind_check CHECK ((kind = ANY (ARRAY['exec'::text, 'port-forward'::text, 'proxy'::text]))),
    CONSTRAINT interactive_sessions_task_index_check CHECK ((task_index >= 0))
);
CREATE TABLE api.job_inputs (
    job_id text NOT NULL,
    "position" integer NOT NULL,
    ref text NOT NULL,
    artifact_id text NOT NULL,
    path text NOT NULL,
    CONSTRAINT job_inputs_position_check CHECK (("position" >= 0)),
    CONSTRAINT job_inputs_ref_check CHECK (((ref ~ '^[a-z0-9][a-z0-9_-]*@[1-9][0-9]*$'::text) OR (ref ~ '^job-[0-9a-z]{26}:[a-z0-9_-]+$'::text)))
);
CREATE TABLE api.job_secrets (
    job_id text NOT NULL,
    name text NOT NULL,
    value text NOT NULL,
    CONSTRAINT job_secrets_name_check CHECK ((name ~ '^CORRAL_SECRET_[A-Z0-9_]+$'::text))
);
CREATE TABLE api.jobs (
    id text NOT NULL,
    name text NOT NULL,
    username text NOT NULL,
    virtual_cluster text NOT NULL,
    priority integer DEFAULT 0 NOT NULL,
    spec jsonb NOT NULL,
    total_gpus integer NOT NULL,
    state text NOT NULL,
    version integer DEFAULT 1 NOT NULL,
    generation integer DEFAULT 0 NOT NULL,
    exit_code integer,
    reason text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    cancel_requested_at timestamp with time zone,
    retries integer DEFAULT 0 NOT NULL,
    not_before timestamp with time zone,
    traceparent text,
    tags text[] DEFAULT '{}'::text[] NOT NULL,
    CONSTRAINT jobs_state_check CHECK ((state = ANY (ARRAY['PENDING'::text, 'SCHEDULED'::text, 'RUNNING'::text, 'SUCCEEDED'::text, 'FAILED'::text, 'CANCELLED'::text])))
);
CREATE TABLE api.join_tokens (
    id text NOT NULL,
    secret_sha256 text NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    used_at timestamp with time zone,
    used_by_node text,
    CONSTRAINT join_tokens_secret_sha256_check CHECK ((secret_sha256 ~ '^[0-9a-f]{64}$'::text))
);
CREATE TABLE api.model_versions (
    model text NOT NULL,
    version integer NOT NULL,
    artifact_id text NOT NULL,
    source_job text NOT NULL,
    source_output text NOT NULL,
    parent_version integer,
    description text DEFAULT ''::text NOT NULL,
    registered_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT model_versions_check CHECK ((parent_version < version)),
    CONSTRAINT model_versions_version_check CHECK ((version >= 1))
);
CREATE TABLE api.models (
    name text NOT NULL,
    owner text NOT NULL,
    group_name text,
    description text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT models_name_check CHECK ((name ~ '^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$'::text))
);
CREATE TABLE api.portal_sessions (
    secret_sha256 text NOT NULL,
    token_sha256 text NOT NULL,
    username text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT portal_sessions_secret_sha256_check CHECK ((secret_sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT portal_sessions_token_sha256_check CHECK ((token_sha256 ~ '^[0-9a-f]{64}$'::text))
);
CREATE TABLE api.service_replicas (
    job_id text NOT NULL,
    service text NOT NULL,
    revision integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    draining_at timestamp with time zone
);
CREATE TABLE api.services (
    name text NOT NULL,
    owner text NOT NULL,
    virtual_cluster text NOT NULL,
    revision integer DEFAULT 1 NOT NULL,
    spec jsonb NOT NULL,
    replicas integer NOT NULL,
    public boolean DEFAULT false NOT NULL,
    deleting_at timestamp with time zone,
    blocked_reason text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT services_name_check CHECK ((name ~ '^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$'::text)),
    CONSTRAINT services_replicas_check CHECK (((replicas >= 0) AND (replicas <= 64))),
    CONSTRAINT services_revision_check CHECK ((revision >= 1))
);
CREATE TABLE api.storage_configs (
    name text NOT NULL,
    kind text NOT NULL,
    source text NOT NULL,
    read_only boolean DEFAULT false NOT NULL,
    all_users boolean DEFAULT false NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_by text NOT NULL,
    CONSTRAINT storage_configs_kind_check CHECK ((kind = ANY (ARRAY['hostpath'::text, 'nfs'::text]))),
    CONSTRAINT storage_configs_name_check CHECK ((name ~ '^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$'::text)),
    CONSTRAINT storage_configs_source_check CHECK (((source <> ''::text) AND (length(source) <= 1024)))
);
CREATE TABLE api.storage_groups (
    storage_name text NOT NULL,
    group_name text NOT NULL
);
CREATE TABLE api.tokens (
    id text NOT NULL,
    name text NOT NULL,
    sha256 text NOT NULL,
    username text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    scopes text[] NOT NULL,
    expires_at timestamp with time zone,
    created_by text DEFAULT 'corral'::text NOT NULL,
    CONSTRAINT tokens_scopes_check CHECK (((cardinality(scopes) > 0) AND (scopes <@ '{read,submit,admin,exec,serve}'::text[])))
);
CREATE TABLE api.user_ssh_keys (
    username text NOT NULL,
    name text NOT NULL,
    public_key text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT user_ssh_keys_name_check CHECK ((name ~ '^[a-z0-9]([a-z0-9_.-]{0,62}[a-z0-9])?$'::text)),
    CONSTRAINT user_ssh_keys_public_key_check CHECK (((public_key <> ''::text) AND (length(public_key) <= 16600)))
);
CREATE TABLE api.users (
    name text NOT NULL,
    role text NOT NULL,
    display_name text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text DEFAULT 'corral'::text NOT NULL,
    CONSTRAINT users_role_check CHECK ((role = ANY (ARRAY['admin'::text, 'user'::text])))
);
CREATE TABLE api.virtual_clusters (
    name text NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    quota jsonb DEFAULT '{}'::jsonb NOT NULL,
    max_gpus_per_user integer,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_by text DEFAULT 'corral'::text NOT NULL,
    allowed_groups text[],
    interactive boolean DEFAULT true NOT NULL,
    CONSTRAINT virtual_clusters_max_gpus_per_user_check CHECK (((max_gpus_per_user IS NULL) OR (max_gpus_per_user >= 0))),
    CONSTRAINT virtual_clusters_quota_check CHECK ((jsonb_typeof(quota) = 'object'::text))
);
CREATE TABLE api.webhook_attempts (
    id bigint NOT NULL,
    delivery_id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    status integer,
    error text,
    duration_ms integer NOT NULL
);
CREATE SEQUENCE api.webhook_attempts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE api.webhook_attempts_id_seq OWNED BY api.webhook_attempts.id;
CREATE TABLE api.webhook_deliveries (
    id bigint NOT NULL,
    webhook_id text NOT NULL,
    event_id text NOT NULL,
    event_type text NOT NULL,
    payload bytea NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    last_status integer,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    queued_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT webhook_deliveries_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text])))
);
CREATE SEQUENCE api.webhook_deliveries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE api.webhook_deliveries_id_seq OWNED BY api.webhook_deliveries.id;
CREATE TABLE api.webhook_secrets (
    id bigint NOT NULL,
    webhook_id text NOT NULL,
    secret text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone
);
CREATE SEQUENCE api.webhook_secrets_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE api.webhook_secrets_id_seq OWNED BY api.webhook_secrets.id;
CREATE TABLE api.webhooks (
    id text NOT NULL,
    username text NOT NULL,
    sees_all boolean DEFAULT false NOT NULL,
    url text NOT NULL,
    event_types text[] NOT NULL,
    virtual_cluster text,
    description text DEFAULT ''::text NOT NULL,
    enabled boolean DEFAULT true NOT NULL,
    disabled_reason text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT webhooks_event_types_check CHECK ((cardinality(event_types) > 0))
);
CREATE TABLE corral.dead_letters (
    id bigint NOT NULL,
    consumer text NOT NULL,
    subject text NOT NULL,
    stream_seq bigint,
    reason text NOT NULL,
    payload bytea NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);
CREATE SEQUENCE corral.dead_letters_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE corral.dead_letters_id_seq OWNED BY corral.dead_letters.id;
CREATE TABLE corral.outbox (
    id bigint NOT NULL,
    event_id text NOT NULL,
    subject text NOT NULL,
    aggregate text NOT NULL,
    part smallint NOT NULL,
    payload bytea NOT NULL,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone
);
CREATE SEQUENCE corral.outbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE corral.outbox_id_seq OWNED BY corral.outbox.id;
CREATE TABLE corral.processed_events (
    consumer text NOT NULL,
    event_id text NOT NULL,
    processed_at timestamp with time zone DEFAULT now() NOT NULL
);
CREATE TABLE corral.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);
CREATE TABLE corral.service_instances (
    instance_id text NOT NULL,
    service text NOT NULL,
    hostname text NOT NULL,
    pid integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_seen_at timestamp with time zone DEFAULT now() NOT NULL
);
CREATE TABLE launcher.agents (
    node_id text NOT NULL,
    epoch bigint NOT NULL,
    lease_expires_at timestamp with time zone NOT NULL,
    lost_at timestamp with time zone,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    isolation text DEFAULT 'unknown'::text NOT NULL,
    isolation_detail text DEFAULT ''::text NOT NULL,
    machine_cpus integer DEFAULT 0 NOT NULL
);
CREATE TABLE launcher.artifacts (
    id text NOT NULL,
    job_id text NOT NULL,
    output text NOT NULL,
    manifest jsonb NOT NULL,
    files integer NOT NULL,
    size_bytes bigint NOT NULL,
    sha256 text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT artifacts_files_check CHECK ((files >= 0)),
    CONSTRAINT artifacts_id_check CHECK ((id ~ '^art-[0-9a-z]{26}$'::text)),
    CONSTRAINT artifacts_sha256_check CHECK ((sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT artifacts_size_bytes_check CHECK ((size_bytes >= 0))
);
CREATE TABLE launcher.attempts (
    id text NOT NULL,
    job_id text NOT NULL,
    generation integer NOT NULL,
    task_role text NOT NULL,
    task_index integer NOT NULL,
    attempt_no integer NOT NULL,
    node_id text NOT NULL,
    gpu_indices integer[] NOT NULL,
    state text NOT NULL,
    pid integer,
    pid_start_ticks bigint,
    exit_code integer,
    signal integer,
    reason text DEFAULT ''::text NOT NULL,
    log_path text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    host text DEFAULT '127.0.0.1'::text NOT NULL,
    ports jsonb DEFAULT '{}'::jsonb NOT NULL,
    classification text,
    stop_requested_at timestamp with time zone,
    stop_reason text,
    stop_platform text,
    ready boolean DEFAULT false NOT NULL,
    ready_detail text DEFAULT ''::text NOT NULL,
    ready_changed_at timestamp with time zone,
    gpu_memory_used_mb integer,
    gpu_memory_read_at timestamp with time zone,
    CONSTRAINT attempts_classification_check CHECK ((classification = ANY (ARRAY['transient'::text, 'permanent'::text, 'unknown'::text]))),
    CONSTRAINT attempts_gpu_memory_used_mb_check CHECK ((gpu_memory_used_mb >= 0)),
    CONSTRAINT attempts_ready_detail_check CHECK ((length(ready_detail) <= 500)),
    CONSTRAINT attempts_state_check CHECK ((state = ANY (ARRAY['ASSIGNED'::text, 'STARTING'::text, 'RUNNING'::text, 'EXITED'::text, 'LOST'::text])))
);
CREATE TABLE launcher.job_ssh_keys (
    job_id text NOT NULL,
    generation integer NOT NULL,
    user_private_key text NOT NULL,
    user_public_key text NOT NULL,
    host_private_key text NOT NULL,
    host_public_key text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);
CREATE TABLE launcher.node_credentials (
    node_id text NOT NULL,
    secret_sha256 text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    CONSTRAINT node_credentials_secret_sha256_check CHECK ((secret_sha256 ~ '^[0-9a-f]{64}$'::text))
);
CREATE TABLE launcher.task_outputs (
    attempt_id text NOT NULL,
    job_id text NOT NULL,
    task_role text NOT NULL,
    task_index integer NOT NULL,
    manifest jsonb NOT NULL,
    size_bytes bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT task_outputs_size_bytes_check CHECK ((size_bytes >= 0))
);
CREATE TABLE monitor.gpu_history (
    resolution_s integer NOT NULL,
    bucket timestamp with time zone NOT NULL,
    node_id text NOT NULL,
    gpu_index integer NOT NULL,
    job_id text,
    samples integer NOT NULL,
    utilization_avg real,
    utilization_max real,
    memory_used_mb_max integer,
    temperature_max real,
    power_avg real
);
CREATE UNLOGGED TABLE monitor.gpu_readings (
    node_id text NOT NULL,
    index integer NOT NULL,
    utilization_pct real,
    memory_utilization_pct real,
    memory_used_mb integer,
    temperature_c real,
    power_w real,
    sm_clock_mhz integer,
    throttle_reasons text[],
    ecc_corrected_volatile bigint,
    ecc_uncorrected_volatile bigint,
    remapped_rows_pending boolean,
    remap_failure boolean,
    last_xid integer,
    xid_count integer DEFAULT 0 NOT NULL,
    lost boolean DEFAULT false NOT NULL,
    unsupported text[] DEFAULT '{}'::text[] NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
)
WITH (fillfactor='50');
CREATE TABLE monitor.gpus (
    node_id text NOT NULL,
    index integer NOT NULL,
    uuid text NOT NULL,
    model text NOT NULL,
    memory_total_mb integer NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    nvlink_domain integer DEFAULT 0 NOT NULL
);
CREATE TABLE monitor.nodes (
    id text NOT NULL,
    hostname text NOT NULL,
    simulated boolean NOT NULL,
    state text NOT NULL,
    gpu_count integer NOT NULL,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    last_heartbeat timestamp with time zone NOT NULL,
    state_changed_at timestamp with time zone DEFAULT now() NOT NULL,
    address text DEFAULT '127.0.0.1'::text NOT NULL,
    drained_at timestamp with time zone,
    drain_reason text,
    drained_by text,
    drain_evicts boolean DEFAULT false NOT NULL,
    expected_gpus integer DEFAULT 0 NOT NULL,
    health_marks jsonb DEFAULT '{}'::jsonb NOT NULL,
    health_waivers text[] DEFAULT '{}'::text[] NOT NULL,
    rack text DEFAULT ''::text NOT NULL,
    cpus double precision DEFAULT 0 NOT NULL,
    memory_mb bigint DEFAULT 0 NOT NULL,
    gpu_sharing text DEFAULT 'none'::text NOT NULL,
    container_runtime text DEFAULT ''::text NOT NULL,
    CONSTRAINT nodes_container_runtime_check CHECK ((container_runtime = ANY (ARRAY[''::text, 'podman'::text, 'docker'::text, 'apptainer'::text]))),
    CONSTRAINT nodes_gpu_sharing_check CHECK ((gpu_sharing = ANY (ARRAY['none'::text, 'timeslice'::text, 'mps'::text, 'hami'::text, 'mig'::text]))),
    CONSTRAINT nodes_state_check CHECK ((state = ANY (ARRAY['READY'::text, 'UNREACHABLE'::text, 'DRAINED'::text])))
);
CREATE VIEW monitor.gpu_status AS
 SELECT g.node_id,
    g.index,
    g.uuid,
    g.model,
    g.memory_total_mb,
    r.utilization_pct,
    r.memory_used_mb,
    r.temperature_c,
    r.memory_utilization_pct,
    r.power_w,
    r.sm_clock_mhz,
    r.throttle_reasons,
    r.ecc_corrected_volatile,
    r.ecc_uncorrected_volatile,
    r.remapped_rows_pending,
    r.remap_failure,
    r.last_xid,
    COALESCE(r.lost, false) AS lost,
    COALESCE(r.unsupported, '{}'::text[]) AS unsupported,
    COALESCE(r.updated_at, g.updated_at) AS updated_at,
    n.hostname,
    n.simulated,
    n.state AS node_state,
    (n.drained_at IS NOT NULL) AS drained,
    o.job_id,
    o.task,
    g.nvlink_domain,
    n.rack
   FROM (((monitor.gpus g
     JOIN monitor.nodes n ON ((n.id = g.node_id)))
     LEFT JOIN monitor.gpu_readings r ON (((r.node_id = g.node_id) AND (r.index = g.index))))
     LEFT JOIN LATERAL ( SELECT a.job_id,
            ((a.task_role || '-'::text) || a.task_index) AS task
           FROM launcher.attempts a
          WHERE ((a.node_id = g.node_id) AND (g.index = ANY (a.gpu_indices)) AND (a.state = ANY (ARRAY['ASSIGNED'::text, 'STARTING'::text, 'RUNNING'::text])))
         LIMIT 1) o ON (true));
CREATE TABLE monitor.health_events (
    id bigint NOT NULL,
    node_id text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    kind text NOT NULL,
    gpu_index integer,
    condition text NOT NULL,
    action text NOT NULL,
    detail text NOT NULL,
    actor text NOT NULL,
    CONSTRAINT health_events_action_check CHECK ((action = ANY (ARRAY['drain'::text, 'evict'::text, 'ignore'::text, 'none'::text]))),
    CONSTRAINT health_events_kind_check CHECK ((kind = ANY (ARRAY['finding'::text, 'drained'::text, 'undrained'::text])))
);
CREATE SEQUENCE monitor.health_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;
ALTER SEQUENCE monitor.health_events_id_seq OWNED BY monitor.health_events.id;
CREATE TABLE monitor.job_gpu_usage_daily (
    day date NOT NULL,
    job_id text NOT NULL,
    samples bigint NOT NULL,
    utilization_sum double precision NOT NULL
);
CREATE TABLE monitor.job_gpu_usage_mark (
    only_row boolean DEFAULT true NOT NULL,
    folded_until timestamp with time zone NOT NULL,
    CONSTRAINT job_gpu_usage_mark_only_row_check CHECK (only_row)
);
CREATE TABLE scheduler.allocations (
    job_id text NOT NULL,
    generation integer NOT NULL,
    task_role text NOT NULL,
    task_index integer NOT NULL,
    node_id text NOT NULL,
    gpu_indices integer[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    released_at timestamp with time zone,
    borrowed boolean DEFAULT false NOT NULL,
    promoted boolean DEFAULT false NOT NULL,
    gpu_milli integer DEFAULT 0 NOT NULL,
    CONSTRAINT allocations_check CHECK (((gpu_milli >= 0) AND (gpu_milli < 1000) AND ((gpu_milli = 0) OR (cardinality(gpu_indices) = 1))))
);
CREATE TABLE scheduler.pending_status (
    job_id text NOT NULL,
    reason text NOT NULL,
    detail text NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    estimated_start timestamp with time zone,
    CONSTRAINT pending_status_reason_check CHECK ((reason = ANY (ARRAY['WaitingForQuota'::text, 'WaitingForPreemption'::text, 'UserLimit'::text, 'InsufficientGPUs'::text, 'GangDoesNotFit'::text, 'Fragmented'::text, 'NodesUnhealthy'::text, 'Priority'::text])))
);
CREATE TABLE scheduler.preemptions (
    job_id text NOT NULL,
    generation integer NOT NULL,
    reason text NOT NULL,
    requested_at timestamp with time zone DEFAULT now() NOT NULL
);
CREATE TABLE scheduler.queue_order (
    only_row boolean DEFAULT true NOT NULL,
    job_ids text[] NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT queue_order_only_row_check CHECK (only_row)
);
CREATE VIEW scheduler.queue_positions AS
 SELECT u.job_id,
    (u."position")::integer AS "position"
   FROM scheduler.queue_order,
    LATERAL unnest(queue_order.job_ids) WITH ORDINALITY u(job_id, "position");
ALTER TABLE ONLY alerter.alert_transitions ALTER COLUMN id SET DEFAULT nextval('alerter.alert_transitions_id_seq'::regclass);
ALTER TABLE ONLY alerter.notifications ALTER COLUMN id SET DEFAULT nextval('alerter.notifications_id_seq'::regclass);
ALTER TABLE ONLY api.audit_log ALTER COLUMN id SET DEFAULT nextval('api.audit_log_id_seq'::regclass);
ALTER TABLE ONLY api.webhook_attempts ALTER COLUMN id SET DEFAULT nextval('api.webhook_attempts_id_seq'::regclass);
ALTER TABLE ONLY api.webhook_deliveries ALTER COLUMN id SET DEFAULT nextval('api.webhook_deliveries_id_seq'::regclass);
ALTER TABLE ONLY api.webhook_secrets ALTER COLUMN id SET DEFAULT nextval('api.webhook_secrets_id_seq'::regclass);
ALTER TABLE ONLY corral.dead_letters ALTER COLUMN id SET DEFAULT nextval('corral.dead_letters_id_seq'::regclass);
ALTER TABLE ONLY corral.outbox ALTER COLUMN id SET DEFAULT nextval('corral.outbox_id_seq'::regclass);
ALTER TABLE ONLY monitor.health_events ALTER COLUMN id SET DEFAULT nextval('monitor.health_events_id_seq'::regclass);
ALTER TABLE ONLY alerter.alert_transitions
    ADD CONSTRAINT alert_transitions_pkey PRIMARY KEY (id);
ALTER TABLE ONLY alerter.alerts
    ADD CONSTRAINT alerts_pkey PRIMARY KEY (id);
ALTER TABLE ONLY alerter.notification_groups
    ADD CONSTRAINT notification_groups_pkey PRIMARY KEY (receiver, group_key);
ALTER TABLE ONLY alerter.notifications
    ADD CONSTRAINT notifications_once_per_round UNIQUE (alert_id, event, receiver, round);
ALTER TABLE ONLY alerter.notifications
    ADD CONSTRAINT notifications_pkey PRIMARY KEY (id);
ALTER TABLE ONLY alerter.rule_overrides
    ADD CONSTRAINT rule_overrides_pkey PRIMARY KEY (singleton);
ALTER TABLE ONLY alerter.rules_in_force
    ADD CONSTRAINT rules_in_force_pkey PRIMARY KEY (singleton);
ALTER TABLE ONLY alerter.silences
    ADD CONSTRAINT silences_pkey PRIMARY KEY (id);
ALTER TABLE ONLY api.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);
ALTER TABLE ONLY api.bus_credentials
    ADD CONSTRAINT bus_credentials_pkey PRIMARY KEY (user_name);
ALTER TABLE ONLY api.group_members
    ADD CONSTRAINT group_members_pkey PRIMARY KEY (group_name, username);
ALTER TABLE ONLY api.groups
    ADD CONSTRAINT groups_pkey PRIMARY KEY (name);
ALTER TABLE ONLY api.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (username, key);
ALTER TABLE ONLY api.interactive_sessions
    ADD CONSTRAINT interactive_sessions_pkey PRIMARY KEY (id);
ALTER TABLE ONLY api.job_inputs
    ADD CONSTRAINT job_inputs_pkey PRIMARY KEY (job_id, "position");
ALTER TABLE ONLY api.job_secrets
    ADD CONSTRAINT job_secrets_pkey PRIMARY KEY (job_id, name);
ALTER TABLE ONLY api.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);
ALTER TABLE ONLY api.join_tokens
    ADD CONSTRAINT join_tokens_pkey PRIMARY KEY (id);
ALTER TABLE ONLY api.model_versions
    ADD CONSTRAINT model_versions_pkey PRIMARY KEY (model, version);
ALTER TABLE ONLY api.models
    ADD CONSTRAINT models_pkey PRIMARY KEY (name);
ALTER TABLE ONLY api.portal_sessions
    ADD CONSTRAINT portal_sessions_pkey PRIMARY KEY (secret_sha256);
ALTER TABLE ONLY api.service_replicas
    ADD CONSTRAINT service_replicas_pkey PRIMARY KEY (job_id);
ALTER TABLE ONLY api.services
    ADD CONSTRAINT services_pkey PRIMARY KEY (name);
ALTER TABLE ONLY api.storage_configs
    ADD CONSTRAINT storage_configs_pkey PRIMARY KEY (name);
ALTER TABLE ONLY api.storage_groups
    ADD CONSTRAINT storage_groups_pkey PRIMARY KEY (storage_name, group_name);
ALTER TABLE ONLY api.tokens
    ADD CONSTRAINT tokens_pkey PRIMARY KEY (id);
ALTER TABLE ONLY api.tokens
    ADD CONSTRAINT tokens_sha256_key UNIQUE (sha256);
ALTER TABLE ONLY api.user_ssh_keys
    ADD CONSTRAINT user_ssh_keys_pkey PRIMARY KEY (username, name);
ALTER TABLE ONLY api.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (name);
ALTER TABLE ONLY api.virtual_clusters
    ADD CONSTRAINT virtual_clusters_pkey PRIMARY KEY (name);
ALTER TABLE ONLY api.webhook_attempts
    ADD CONSTRAINT webhook_attempts_pkey PRIMARY KEY (id);
ALTER TABLE ONLY api.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id);
ALTER TABLE ONLY api.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_webhook_id_event_id_key UNIQUE (webhook_id, event_id);
ALTER TABLE ONLY api.webhook_secrets
    ADD CONSTRAINT webhook_secrets_pkey PRIMARY KEY (id);
ALTER TABLE ONLY api.webhooks
    ADD CONSTRAINT webhooks_pkey PRIMARY KEY (id);
ALTER TABLE ONLY corral.dead_letters
    ADD CONSTRAINT dead_letters_pkey PRIMARY KEY (id);
ALTER TABLE ONLY corral.outbox
    ADD CONSTRAINT outbox_event_id_key UNIQUE (event_id);
ALTER TABLE ONLY corral.outbox
    ADD CONSTRAINT outbox_pkey PRIMARY KEY (id);
ALTER TABLE ONLY corral.processed_events
    ADD CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, event_id);
ALTER TABLE ONLY corral.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);
ALTER TABLE ONLY corral.service_instances
    ADD CONSTRAINT service_instances_pkey PRIMARY KEY (instance_id);
ALTER TABLE ONLY launcher.agents
    ADD CONSTRAINT agents_pkey PRIMARY KEY (node_id);
ALTER TABLE ONLY launcher.artifacts
    ADD CONSTRAINT artifacts_job_id_output_key UNIQUE (job_id, output);
ALTER TABLE ONLY launcher.artifacts
    ADD CONSTRAINT artifacts_pkey PRIMARY KEY (id);
ALTER TABLE ONLY launcher.attempts
    ADD CONSTRAINT attempts_job_id_generation_task_role_task_index_key UNIQUE (job_id, generation, task_role, task_index);
ALTER TABLE ONLY launcher.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (id);
ALTER TABLE ONLY launcher.job_ssh_keys
    ADD CONSTRAINT job_ssh_keys_pkey PRIMARY KEY (job_id, generation);
ALTER TABLE ONLY launcher.node_credentials
    ADD CONSTRAINT node_credentials_pkey PRIMARY KEY (node_id);
ALTER TABLE ONLY launcher.task_outputs
    ADD CONSTRAINT task_outputs_pkey PRIMARY KEY (attempt_id);
ALTER TABLE ONLY monitor.gpu_history
    ADD CONSTRAINT gpu_history_pkey PRIMARY KEY (resolution_s, node_id, gpu_index, bucket);
ALTER TABLE ONLY monitor.gpu_readings
    ADD CONSTRAINT gpu_readings_pkey PRIMARY KEY (node_id, index);
ALTER TABLE ONLY monitor.gpus
    ADD CONSTRAINT gpus_pkey PRIMARY KEY (node_id, index);
ALTER TABLE ONLY monitor.health_events
    ADD CONSTRAINT health_events_pkey PRIMARY KEY (id);
ALTER TABLE ONLY monitor.job_gpu_usage_daily
    ADD CONSTRAINT job_gpu_usage_daily_pkey PRIMARY KEY (day, job_id);
ALTER TABLE ONLY monitor.job_gpu_usage_mark
    ADD CONSTRAINT job_gpu_usage_mark_pkey PRIMARY KEY (only_row);
ALTER TABLE ONLY monitor.nodes
    ADD CONSTRAINT nodes_pkey PRIMARY KEY (id);
ALTER TABLE ONLY scheduler.allocations
    ADD CONSTRAINT allocations_pkey PRIMARY KEY (job_id, generation, task_role, task_index);
ALTER TABLE ONLY scheduler.pending_status
    ADD CONSTRAINT pending_status_pkey PRIMARY KEY (job_id);
ALTER TABLE ONLY scheduler.preemptions
    ADD CONSTRAINT preemptions_pkey PRIMARY KEY (job_id, generation);
ALTER TABLE ONLY scheduler.queue_order
    ADD CONSTRAINT queue_order_pkey PRIMARY KEY (only_row);
CREATE INDEX alert_transitions_by_alert ON alerter.alert_transitions USING btree (alert_id, id);
CREATE UNIQUE INDEX alerts_one_open_per_fingerprint ON alerter.alerts USING btree (fingerprint) WHERE (state <> 'resolved'::text);
CREATE INDEX notifications_by_group ON alerter.notifications USING btree (receiver, group_key);
CREATE INDEX notifications_due ON alerter.notifications USING btree (next_attempt_at) WHERE (state = 'pending'::text);
CREATE INDEX silences_active ON alerter.silences USING btree (ends_at);
CREATE INDEX audit_log_by_target ON api.audit_log USING btree (target, id) WHERE (target IS NOT NULL);
CREATE INDEX audit_log_by_user ON api.audit_log USING btree (username, id);
CREATE INDEX group_members_by_user ON api.group_members USING btree (username);
CREATE INDEX idempotency_keys_created ON api.idempotency_keys USING btree (created_at);
CREATE INDEX interactive_sessions_by_age ON api.interactive_sessions USING btree (created_at);
CREATE INDEX interactive_sessions_by_job ON api.interactive_sessions USING btree (job_id, created_at DESC);
CREATE INDEX interactive_sessions_by_user ON api.interactive_sessions USING btree (username, created_at DESC);
CREATE INDEX jobs_active ON api.jobs USING btree (state, created_at) WHERE (state = ANY (ARRAY['PENDING'::text, 'SCHEDULED'::text, 'RUNNING'::text]));
CREATE INDEX jobs_finished ON api.jobs USING btree (finished_at) WHERE (finished_at IS NOT NULL);
CREATE INDEX jobs_newest_first ON api.jobs USING btree (created_at DESC, id DESC);
CREATE INDEX jobs_state_newest_first ON api.jobs USING btree (state, created_at DESC, id DESC);
CREATE INDEX jobs_tags ON api.jobs USING gin (tags);
CREATE INDEX jobs_user_created ON api.jobs USING btree (username, created_at DESC, id DESC);
CREATE INDEX jobs_vc_newest_first ON api.jobs USING btree (virtual_cluster, created_at DESC, id DESC);
CREATE INDEX model_versions_by_artifact ON api.model_versions USING btree (artifact_id);
CREATE INDEX models_by_group ON api.models USING btree (group_name, name) WHERE (group_name IS NOT NULL);
CREATE INDEX models_by_owner ON api.models USING btree (owner, name);
CREATE INDEX portal_sessions_expiry ON api.portal_sessions USING btree (expires_at);
CREATE INDEX service_replicas_by_service ON api.service_replicas USING btree (service, created_at);
CREATE INDEX services_by_owner ON api.services USING btree (owner, name);
CREATE INDEX storage_groups_by_group ON api.storage_groups USING btree (group_name);
CREATE INDEX tokens_by_user ON api.tokens USING btree (username);
CREATE INDEX webhook_attempts_of ON api.webhook_attempts USING btree (delivery_id, id);
CREATE INDEX webhook_deliveries_due ON api.webhook_deliveries USING btree (next_attempt_at) WHERE (state = 'pending'::text);
CREATE INDEX webhook_deliveries_of ON api.webhook_deliveries USING btree (webhook_id, id DESC);
CREATE INDEX webhook_secrets_of ON api.webhook_secrets USING btree (webhook_id);
CREATE INDEX webhooks_owner ON api.webhooks USING btree (username, created_at);
CREATE INDEX outbox_sent_at ON corral.outbox USING btree (sent_at) WHERE (sent_at IS NOT NULL);
CREATE INDEX outbox_unsent ON corral.outbox USING btree (part, id) WHERE (sent_at IS NULL);
CREATE INDEX processed_events_by_age ON corral.processed_events USING brin (processed_at);
CREATE INDEX service_instances_by_service ON corral.service_instances USING btree (service, last_seen_at);
CREATE INDEX attempts_by_job ON launcher.attempts USING btree (job_id);
CREATE INDEX attempts_by_node_live ON launcher.attempts USING btree (node_id) WHERE (state = ANY (ARRAY['ASSIGNED'::text, 'STARTING'::text, 'RUNNING'::text]));
CREATE UNIQUE INDEX attempts_one_live_per_task ON launcher.attempts USING btree (job_id, task_role, task_index) WHERE (state = ANY (ARRAY['ASSIGNED'::text, 'STARTING'::text, 'RUNNING'::text]));
CREATE INDEX task_outputs_by_task ON launcher.task_outputs USING btree (job_id, task_role, task_index, created_at DESC);
CREATE INDEX gpu_history_by_age ON monitor.gpu_history USING btree (resolution_s, bucket);
CREATE INDEX gpu_history_by_job ON monitor.gpu_history USING btree (job_id, resolution_s, bucket) WHERE (job_id IS NOT NULL);
CREATE INDEX health_events_by_node ON monitor.health_events USING btree (node_id, at DESC);
CREATE INDEX allocations_live ON scheduler.allocations USING btree (node_id) WHERE (released_at IS NULL);
ALTER TABLE ONLY alerter.alert_transitions
    ADD CONSTRAINT alert_transitions_alert_id_fkey FOREIGN KEY (alert_id) REFERENCES alerter.alerts(id);
ALTER TABLE ONLY alerter.notifications
    ADD CONSTRAINT notifications_alert_id_fkey FOREIGN KEY (alert_id) REFERENCES alerter.alerts(id);
ALTER TABLE ONLY api.group_members
    ADD CONSTRAINT group_members_group_name_fkey FOREIGN KEY (group_name) REFERENCES api.groups(name) ON DELETE CASCADE;
ALTER TABLE ONLY api.group_members
    ADD CONSTRAINT group_members_username_fkey FOREIGN KEY (username) REFERENCES api.users(name) ON DELETE CASCADE;
ALTER TABLE ONLY api.idempotency_keys
    ADD CONSTRAINT idempotency_keys_job_id_fkey FOREIGN KEY (job_id) REFERENCES api.jobs(id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE ONLY api.job_inputs
    ADD CONSTRAINT job_inputs_artifact_id_fkey FOREIGN KEY (artifact_id) REFERENCES launcher.artifacts(id);
ALTER TABLE ONLY api.job_inputs
    ADD CONSTRAINT job_inputs_job_id_fkey FOREIGN KEY (job_id) REFERENCES api.jobs(id) ON DELETE CASCADE;
ALTER TABLE ONLY api.job_secrets
    ADD CONSTRAINT job_secrets_job_id_fkey FOREIGN KEY (job_id) REFERENCES api.jobs(id) ON DELETE CASCADE;
ALTER TABLE ONLY api.model_versions
    ADD CONSTRAINT model_versions_artifact_id_fkey FOREIGN KEY (artifact_id) REFERENCES launcher.artifacts(id);
ALTER TABLE ONLY api.model_versions
    ADD CONSTRAINT model_versions_model_fkey FOREIGN KEY (model) REFERENCES api.models(name) ON DELETE CASCADE;
ALTER TABLE ONLY api.model_versions
    ADD CONSTRAINT model_versions_model_parent_version_fkey FOREIGN KEY (model, parent_version) REFERENCES api.model_versions(model, version);
ALTER TABLE ONLY api.models
    ADD CONSTRAINT models_group_name_fkey FOREIGN KEY (group_name) REFERENCES api.groups(name) ON DELETE SET NULL;
ALTER TABLE ONLY api.service_replicas
    ADD CONSTRAINT service_replicas_job_id_fkey FOREIGN KEY (job_id) REFERENCES api.jobs(id);
ALTER TABLE ONLY api.service_replicas
    ADD CONSTRAINT service_replicas_service_fkey FOREIGN KEY (service) REFERENCES api.services(name) ON DELETE CASCADE;
ALTER TABLE ONLY api.storage_groups
    ADD CONSTRAINT storage_groups_group_name_fkey FOREIGN KEY (group_name) REFERENCES api.groups(name) ON DELETE CASCADE;
ALTER TABLE ONLY api.storage_groups
    ADD CONSTRAINT storage_groups_storage_name_fkey FOREIGN KEY (storage_name) REFERENCES api.storage_configs(name) ON DELETE CASCADE;
ALTER TABLE ONLY api.tokens
    ADD CONSTRAINT tokens_username_fkey FOREIGN KEY (username) REFERENCES api.users(name) ON DELETE CASCADE;
ALTER TABLE ONLY api.user_ssh_keys
    ADD CONSTRAINT user_ssh_keys_username_fkey FOREIGN KEY (username) REFERENCES api.users(name) ON DELETE CASCADE;
ALTER TABLE ONLY api.webhook_attempts
    ADD CONSTRAINT webhook_attempts_delivery_id_fkey FOREIGN KEY (delivery_id) REFERENCES api.webhook_deliveries(id) ON DELETE CASCADE;
ALTER TABLE ONLY api.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_webhook_id_fkey FOREIGN KEY (webhook_id) REFERENCES api.webhooks(id) ON DELETE CASCADE;
ALTER TABLE ONLY api.webhook_secrets
    ADD CONSTRAINT webhook_secrets_webhook_id_fkey FOREIGN KEY (webhook_id) REFERENCES api.webhooks(id) ON DELETE CASCADE;
ALTER TABLE ONLY launcher.artifacts
    ADD CONSTRAINT artifacts_job_id_fkey FOREIGN KEY (job_id) REFERENCES api.jobs(id);
ALTER TABLE ONLY launcher.attempts
    ADD CONSTRAINT attempts_job_id_fkey FOREIGN KEY (job_id) REFERENCES api.jobs(id);
ALTER TABLE ONLY launcher.job_ssh_keys
    ADD CONSTRAINT job_ssh_keys_job_id_fkey FOREIGN KEY (job_id) REFERENCES api.jobs(id) ON DELETE CASCADE;
ALTER TABLE ONLY launcher.task_outputs
    ADD CONSTRAINT task_outputs_attempt_id_fkey FOREIGN KEY (attempt_id) REFERENCES launcher.attempts(id);
ALTER TABLE ONLY monitor.gpus
    ADD CONSTRAINT gpus_node_id_fkey FOREIGN KEY (node_id) REFERENCES monitor.nodes(id);
ALTER TABLE ONLY monitor.health_events
    ADD CONSTRAINT health_events_node_id_fkey FOREIGN KEY (node_id) REFERENCES monitor.nodes(id);
ALTER TABLE ONLY scheduler.allocations
    ADD CONSTRAINT allocations_job_id_fkey FOREIGN KEY (job_id) REFERENCES api.jobs(id);
ALTER TABLE ONLY scheduler.pending_status
    ADD CONSTRAINT pending_status_job_id_fkey FOREIGN KEY (job_id) REFERENCES api.jobs(id);
ALTER TABLE ONLY scheduler.preemptions
    ADD CONSTRAINT preemptions_job_id_fkey FOREIGN KEY (job_id) REFERENCES api.jobs(id);
