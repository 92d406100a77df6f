-- 0034 readiness: whether a running attempt answers its readiness probe, and the serve
-- token scope.
--
-- A replica of a service is in the gateway's rotation only while its attempt is RUNNING
-- and ready (services/api/serving/endpoints.py). Who probes decides it: a node agent for
-- the tasks it runs (services/launcher/agent/probes.py), through node_set_readiness
-- below, since a node touches no table; the launcher's Kubernetes runner from the pod's
-- Ready condition, with a plain fenced update. Changes are written, not every probe, so a
-- row changes when a replica enters or leaves rotation and ready_changed_at says since
-- when. ready_detail is the last probe's word ("GET /healthz: 503", "connection
-- refused"), shown beside each replica.
--
-- serve is a scope of its own, outside the read < submit < admin ladder like exec:
-- calling a service through /serve/{name}/ is what an application's token does, and such
-- a token should be able to do nothing else (admin tokens imply it:
-- services/api/tenants/auth.py).

ALTER TABLE launcher.attempts
    ADD COLUMN ready boolean NOT NULL DEFAULT false,
    ADD COLUMN ready_detail text NOT NULL DEFAULT '' CHECK (length(ready_detail) <= 500),
    ADD COLUMN ready_changed_at timestamptz;

-- The node's own RUNNING attempt only: another node's attempt is refused like any other
-- node function's (insufficient_privilege); an attempt of its own that is no longer
-- RUNNING changes nothing (false), as a probe may finish just after its task ended.
CREATE FUNCTION launcher.node_set_readiness(
    p_node text, p_secret text, p_attempt text, p_ready boolean, p_detail text
) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM launcher.check_node(p_node, p_secret);
    PERFORM launcher.check_node_attempt(p_node, p_attempt);
    UPDATE launcher.attempts
    SET ready = p_ready, ready_detail = left(coalesce(p_detail, ''), 500), ready_changed_at = now()
    WHERE id = p_attempt AND node_id = p_node AND state = 'RUNNING';
    RETURN FOUND;
END
$$;

REVOKE EXECUTE ON FUNCTION launcher.node_set_readiness(text, text, text, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION launcher.node_set_readiness(text, text, text, boolean, text) TO corral_agent;

ALTER TABLE api.tokens DROP CONSTRAINT tokens_scopes_check;
ALTER TABLE api.tokens ADD CONSTRAINT tokens_scopes_check
    CHECK (cardinality(scopes) > 0 AND scopes <@ '{read,submit,admin,exec,serve}');
