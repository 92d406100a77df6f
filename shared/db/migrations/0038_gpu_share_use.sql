-- 0038 GPU share use: how much of its GPU's memory each sharing task uses, as its node's
-- agent last read it, for the API and the portal to show beside the task's share.
--
-- The agent reads every shared GPU's processes every few seconds (0037); it records a
-- sharer's use when it has moved by more than a little (services/launcher/agent/gpu_share/
-- watch.py), so a row changes about as often as a program's allocations do, not every
-- check. NULL: never read (a whole-GPU task, or a node that cannot read its processes).
-- Through node_record_gpu_use below, for the node's own RUNNING attempts only, several in
-- one call, as a node touches no table.

ALTER TABLE launcher.attempts
    ADD COLUMN gpu_memory_used_mb integer CHECK (gpu_memory_used_mb >= 0),
    ADD COLUMN gpu_memory_read_at timestamptz;

CREATE FUNCTION launcher.node_record_gpu_use(
    p_node text, p_secret text, p_attempts text[], p_used_mb integer[]
) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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

REVOKE EXECUTE ON FUNCTION launcher.node_record_gpu_use(text, text, text[], integer[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION launcher.node_record_gpu_use(text, text, text[], integer[]) TO corral_agent;
