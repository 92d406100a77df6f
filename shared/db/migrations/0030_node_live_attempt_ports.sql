-- 0030 a node's live attempts carry their ports: an agent that restarts and re-adopts its
-- running tasks still knows each task's allocated ports, so it can refuse a port-forward to
-- a port that is not the task's (services/launcher/agent/interactive/) as it does for the
-- tasks it started itself. The result's columns change, so the function is made again,
-- with its grants.

DROP FUNCTION launcher.node_live_attempts(text, text);

CREATE FUNCTION launcher.node_live_attempts(p_node text, p_secret text)
RETURNS TABLE (
    id text, job_id text, generation integer, state text, pid integer, pid_start_ticks bigint, log_path text,
    task_role text, task_index integer, attempt_no integer, stop_requested_at timestamptz, stop_reason text,
    stop_platform text, spec jsonb, ports jsonb
)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    RETURN QUERY
    SELECT a.id, a.job_id, a.generation, a.state, a.pid, a.pid_start_ticks, a.log_path, a.task_role,
           a.task_index, a.attempt_no, a.stop_requested_at, a.stop_reason, a.stop_platform, j.spec, a.ports
    FROM launcher.attempts a JOIN api.jobs j ON j.id = a.job_id
    WHERE a.node_id = p_node AND a.state IN ('ASSIGNED', 'STARTING', 'RUNNING');
END
$$;

REVOKE EXECUTE ON FUNCTION launcher.node_live_attempts(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION launcher.node_live_attempts(text, text) TO corral_agent;
