-- Who may read a model: its owner, members of its group, admins ($2: the reader, $3:
-- whether they act as an admin). The same predicate in every read below, so a model
-- someone may not read is one they cannot tell from a model that does not exist.

-- name: list_models
-- A page of the models the reader may read, by name, after $1 (the last of the previous page).
SELECT m.name, m.owner, m.group_name, m.description, m.created_at,
       coalesce(v.latest, 0) AS latest_version, v.latest_at
FROM api.models m
LEFT JOIN LATERAL (
    SELECT max(version) AS latest, max(created_at) AS latest_at FROM api.model_versions WHERE model = m.name
) v ON true
WHERE ($3 OR m.owner = $2
       OR m.group_name IN (SELECT group_name FROM api.group_members WHERE username = $2))
  AND ($1::text IS NULL OR m.name > $1)
ORDER BY m.name
LIMIT $4;

-- name: get_model
SELECT m.name, m.owner, m.group_name, m.description, m.created_at,
       coalesce((SELECT max(version) FROM api.model_versions WHERE model = m.name), 0) AS latest_version,
       (SELECT max(created_at) FROM api.model_versions WHERE model = m.name) AS latest_at
FROM api.models m
WHERE m.name = $1
  AND ($3 OR m.owner = $2
       OR m.group_name IN (SELECT group_name FROM api.group_members WHERE username = $2));

-- name: versions_of_model
-- Newest first, with what each version's artifact holds.
SELECT v.model, v.version, v.artifact_id, v.source_job, v.source_output, v.parent_version, v.description,
       v.registered_by, v.created_at, a.sha256, a.files, a.size_bytes
FROM api.model_versions v LEFT JOIN launcher.artifacts a ON a.id = v.artifact_id
WHERE v.model = $1
ORDER BY v.version DESC
LIMIT $2;

-- name: get_version
-- Version $2 of model $1, or its newest when $2 is NULL.
SELECT v.model, v.version, v.artifact_id, v.source_job, v.source_output, v.parent_version, v.description,
       v.registered_by, v.created_at, a.sha256, a.files, a.size_bytes
FROM api.model_versions v LEFT JOIN launcher.artifacts a ON a.id = v.artifact_id
WHERE v.model = $1 AND ($2::integer IS NULL OR v.version = $2)
ORDER BY v.version DESC
LIMIT 1;

-- name: lock_model
-- The model's row, held until the register commits: versions are numbered under it.
SELECT name, owner, group_name FROM api.models WHERE name = $1 FOR UPDATE;

-- name: insert_model
-- A concurrent first register of the same name inserts nothing here, then waits on lock_model.
INSERT INTO api.models (name, owner, group_name, description) VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO NOTHING;

-- name: insert_version
-- The next number of the model (its row is locked: lock_model).
INSERT INTO api.model_versions (model, version, artifact_id, source_job, source_output, parent_version,
                                description, registered_by)
SELECT $1, coalesce(max(version), 0) + 1, $2, $3, $4, $5, $6, $7 FROM api.model_versions WHERE model = $1
RETURNING version;

-- name: has_version
SELECT EXISTS (SELECT 1 FROM api.model_versions WHERE model = $1 AND version = $2);

-- name: parent_from_inputs
-- The newest version of model $2 that job $1 took as an input, if any.
SELECT max(split_part(ref, '@', 2)::integer)
FROM api.job_inputs
WHERE job_id = $1 AND ref LIKE '%@%' AND split_part(ref, '@', 1) = $2;

-- name: group_membership
-- Whether group $1 exists (NULL: not), and whether user $2 is in it.
SELECT EXISTS (SELECT 1 FROM api.group_members WHERE group_name = $1 AND username = $2)
FROM api.groups WHERE name = $1;
