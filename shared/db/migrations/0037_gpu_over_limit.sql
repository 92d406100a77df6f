-- 0037 GPU over limit: a node agent reports a task that used more of a shared GPU's memory
-- than its share, and knows the GPUs of the tasks it re-adopts.
--
-- A node whose GPUs are shared (0036) runs several tasks on one GPU. Its agent reads each
-- shared GPU's processes and their memory (NVML), maps them to tasks, and tells of a task
-- over its share once per attempt (services/launcher/agent/gpu_share/watch.py): the event
-- corral.task.over_limit.v1, which the alerter turns into an alert for the job's owner.
-- Whether the agent also stops the task is the node's policy; the stop itself is an
-- ordinary end of the attempt (node_mark_exited), classified gpu_over_limit.
--
-- A node touches no table, so the event goes through node_report_over_limit below, like
-- its other reports (0025): it checks the node's secret, that the attempt is the node's
-- own and RUNNING, and that the event is a true one about it, then writes the outbox row
-- and wakes the launcher's relay, which publishes it. An attempt that is not RUNNING any
-- more (its task ended meanwhile, or it was taken from this node) is told of no more:
-- false, nothing written.
--
-- A restarted agent re-adopts the tasks an earlier one started; to check a re-adopted
-- sharer it needs the GPU the task holds, so the node's live attempts now carry their
-- gpu_indices. The result's columns change, so the function is made again, with its grants.

CREATE FUNCTION launcher.node_report_over_limit(
    p_node text, p_secret text, p_attempt text,
    p_event_id text, p_subject text, p_aggregate text, p_part smallint, p_payload bytea, p_headers jsonb
) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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

REVOKE EXECUTE ON FUNCTION
    launcher.node_report_over_limit(text, text, text, text, text, text, smallint, bytea, jsonb)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    launcher.node_report_over_limit(text, text, text, text, text, text, smallint, bytea, jsonb)
TO corral_agent;

DROP FUNCTION launcher.node_live_attempts(text, text);

CREATE FUNCTION launcher.node_live_attempts(p_node text, p_secret text)
RETURNS TABLE (
    id text, job_id text, generation integer, state text, pid integer, pid_start_ticks bigint, log_path text,
    task_role text, task_index integer, attempt_no integer, stop_requested_at timestamptz, stop_reason text,
    stop_platform text, spec jsonb, ports jsonb, gpu_indices integer[]
)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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

REVOKE EXECUTE ON FUNCTION launcher.node_live_attempts(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION launcher.node_live_attempts(text, text) TO corral_agent;
