-- name: insert_user
INSERT INTO api.users (name, role, display_name, created_by) VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: list_users
-- With the groups each user belongs to. $1: one user, or NULL for all.
SELECT u.name, u.role, u.display_name, u.created_at, u.created_by,
       coalesce(array_agg(m.group_name ORDER BY m.group_name) FILTER (WHERE m.group_name IS NOT NULL), '{}')
           AS groups
FROM api.users u LEFT JOIN api.group_members m ON m.username = u.name
WHERE $1::text IS NULL OR u.name = $1
GROUP BY u.name
ORDER BY u.name;

-- name: set_user_role
UPDATE api.users SET role = $2 WHERE name = $1 RETURNING name;

-- name: delete_user
-- Its tokens and memberships go with it (foreign keys, ON DELETE CASCADE).
DELETE FROM api.users WHERE name = $1 RETURNING name;

-- name: insert_group
INSERT INTO api.groups (name, description, created_by) VALUES ($1, $2, $3)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: list_groups
-- With members and the VCs each group opens. $1: one group, or NULL for all.
SELECT g.name, g.description, g.created_at, g.created_by,
       coalesce((SELECT array_agg(m.username ORDER BY m.username) FROM api.group_members m
                 WHERE m.group_name = g.name), '{}') AS members,
       coalesce((SELECT array_agg(v.name ORDER BY v.name) FROM api.virtual_clusters v
                 WHERE g.name = ANY (v.allowed_groups)), '{}') AS virtual_clusters
FROM api.groups g
WHERE $1::text IS NULL OR g.name = $1
ORDER BY g.name;

-- name: lock_group
SELECT name FROM api.groups WHERE name = $1 FOR UPDATE;

-- name: delete_group
DELETE FROM api.groups WHERE name = $1;

-- name: drop_group_from_vcs
-- A VC whose list loses its last group is left with an empty list (admins only), never
-- opened to everyone by accident.
UPDATE api.virtual_clusters SET allowed_groups = array_remove(allowed_groups, $1), updated_at = now(),
       updated_by = $2
WHERE $1 = ANY (allowed_groups);

-- name: add_member
INSERT INTO api.group_members (group_name, username, added_by) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING
RETURNING username;

-- name: remove_member
DELETE FROM api.group_members WHERE group_name = $1 AND username = $2 RETURNING username;

-- name: user_exists
SELECT name FROM api.users WHERE name = $1;

-- name: group_exists
SELECT name FROM api.groups WHERE name = $1;

-- name: usable_vcs
-- The VCs a user may see and submit to: open ones, and those one of their groups opens
-- ($1 NULL: an admin, who may use every VC).
SELECT v.name FROM api.virtual_clusters v
WHERE $1::text IS NULL OR v.allowed_groups IS NULL
   OR EXISTS (SELECT 1 FROM api.group_members m WHERE m.username = $1 AND m.group_name = ANY (v.allowed_groups))
ORDER BY v.name;
