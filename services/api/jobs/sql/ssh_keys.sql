-- name: missing_user_ssh_keys
-- The names of $2 that user $1 keeps no ssh key under (api.user_ssh_keys, migration 0041).
SELECT n AS name FROM unnest($2::text[]) AS n
WHERE NOT EXISTS (SELECT FROM api.user_ssh_keys k WHERE k.username = $1 AND k.name = n)
ORDER BY n;
