-- 0039 Storage configs: named mounts an admin defines and jobs use (JobSpec.storage),
-- each mounted at /mnt/NAME in every task of the job (OpenPAI's teamwise storage).
--
-- A config is a kind (hostpath: a directory present on every node; nfs: an export each
-- node mounts), a source (the host path, or server:/export), whether it is read-only, and
-- who may use it: every user (all_users), or the members of the groups in
-- api.storage_groups; admins may use every one. The groups are rows with foreign keys, so
-- deleting a group drops it from every config in the same statement, and a config left
-- with no group admits admins only: deleting a group never opens a storage.
--
-- A node reads a config when it starts a task, through node_attempt_storage below: the
-- configs its own STARTING attempt's job names, as they are then (a config changed after
-- the submit applies to the tasks started after the change), and nothing else.

CREATE TABLE api.storage_configs (
    name text PRIMARY KEY CHECK (name ~ '^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$'),
    kind text NOT NULL CHECK (kind IN ('hostpath', 'nfs')),
    source text NOT NULL CHECK (source <> '' AND length(source) <= 1024),
    read_only boolean NOT NULL DEFAULT false,
    all_users boolean NOT NULL DEFAULT false,
    description text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL
);

CREATE TABLE api.storage_groups (
    storage_name text NOT NULL REFERENCES api.storage_configs (name) ON DELETE CASCADE,
    group_name text NOT NULL REFERENCES api.groups (name) ON DELETE CASCADE,
    PRIMARY KEY (storage_name, group_name)
);
CREATE INDEX storage_groups_by_group ON api.storage_groups (group_name);

GRANT SELECT, INSERT, UPDATE, DELETE ON api.storage_configs, api.storage_groups TO corral_api;
-- The Kubernetes runner claims as the launcher and builds the pod's volumes from the configs.
GRANT SELECT ON api.storage_configs TO corral_launcher;

CREATE FUNCTION launcher.node_attempt_storage(p_node text, p_secret text, p_attempt text)
RETURNS TABLE (name text, kind text, source text, read_only boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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

REVOKE EXECUTE ON FUNCTION launcher.node_attempt_storage(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION launcher.node_attempt_storage(text, text, text) TO corral_agent;
