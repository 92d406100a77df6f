-- name: list_storage
-- With the groups that may use each. $1: one config, or NULL for all.
SELECT c.name, c.kind, c.source, c.read_only, c.all_users, c.description,
       coalesce((SELECT array_agg(g.group_name ORDER BY g.group_name) FROM api.storage_groups g
                 WHERE g.storage_name = c.name), '{}') AS groups,
       c.created_at, c.created_by, c.updated_at, c.updated_by
FROM api.storage_configs c
WHERE $1::text IS NULL OR c.name = $1
ORDER BY c.name;

-- name: missing_groups
-- Of these group names, those that name no group.
SELECT n FROM unnest($1::text[]) AS n WHERE NOT EXISTS (SELECT FROM api.groups g WHERE g.name = n) ORDER BY n;

-- name: upsert_storage
-- Created (true) or changed (false).
INSERT INTO api.storage_configs AS c
    (name, kind, source, read_only, all_users, description, created_by, updated_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
ON CONFLICT (name) DO UPDATE
SET kind = excluded.kind, source = excluded.source, read_only = excluded.read_only,
    all_users = excluded.all_users, description = excluded.description, updated_at = now(),
    updated_by = excluded.updated_by
RETURNING (xmax = 0) AS created;

-- name: clear_storage_groups
DELETE FROM api.storage_groups WHERE storage_name = $1;

-- name: add_storage_groups
INSERT INTO api.storage_groups (storage_name, group_name) SELECT $1, unnest($2::text[]);

-- name: delete_storage
DELETE FROM api.storage_configs WHERE name = $1 RETURNING name;
