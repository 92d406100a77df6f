-- 0041 ssh for generic jobs (a job spec's `ssh`, shared/ssh_spec.py): the public keys users
-- keep in Corral, named (PUT /api/v1/users/me/ssh-keys/NAME), and what a node reads when it
-- starts a task of a job with `ssh`.
--
-- A job names the keys (`ssh.user_keys`); they are looked up when each task starts, as
-- they are then: a key replaced or deleted after the submit applies to the tasks started
-- after the change. The submit refuses a name the user has no key under; a user's keys go
-- with the user.
--
-- Every task of a generic job with `ssh` runs the job's sshd and (with `between_tasks`)
-- logs in to the others, so each gets both of the generation's key pairs, unlike an MPI
-- job's tasks (0035: each role its own). They come through node_attempt_ssh below, for the
-- node's own STARTING attempt only; node_claim_attempt still hands them by MPI role.

CREATE TABLE api.user_ssh_keys (
    username text NOT NULL REFERENCES api.users (name) ON DELETE CASCADE,
    name text NOT NULL CHECK (name ~ '^[a-z0-9]([a-z0-9_.-]{0,62}[a-z0-9])?$'),
    public_key text NOT NULL CHECK (public_key <> '' AND length(public_key) <= 16600),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (username, name)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON api.user_ssh_keys TO corral_api;

CREATE FUNCTION launcher.node_attempt_ssh(p_node text, p_secret text, p_attempt text)
RETURNS TABLE (
    user_private_key text, user_public_key text, host_private_key text, host_public_key text,
    authorized_keys text[]
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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

REVOKE EXECUTE ON FUNCTION launcher.node_attempt_ssh(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION launcher.node_attempt_ssh(text, text, text) TO corral_agent;
