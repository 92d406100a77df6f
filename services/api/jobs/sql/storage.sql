-- name: storage_access
-- Each storage name a job uses, whether a config has it, and whether the user may use it:
-- $2 NULL is an admin, who may use every config; a user may use one open to all users or
-- one a group of theirs may use.
SELECT n AS name, c.name IS NOT NULL AS found,
       c.name IS NOT NULL AND ($2::text IS NULL OR c.all_users OR EXISTS (
           SELECT FROM api.storage_groups g JOIN api.group_members m ON m.group_name = g.group_name
           WHERE g.storage_name = c.name AND m.username = $2)) AS usable
FROM unnest($1::text[]) AS n LEFT JOIN api.storage_configs c ON c.name = n
ORDER BY n;
