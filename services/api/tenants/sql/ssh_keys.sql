-- name: put_ssh_key
-- Made or replaced; true when it was made.
INSERT INTO api.user_ssh_keys (username, name, public_key) VALUES ($1, $2, $3)
ON CONFLICT (username, name) DO UPDATE SET public_key = EXCLUDED.public_key, updated_at = now()
RETURNING (xmax = 0) AS created;

-- name: ssh_keys
-- One user's keys, by name; $2 NULL for all of them.
SELECT name, public_key, created_at, updated_at FROM api.user_ssh_keys
WHERE username = $1 AND ($2::text IS NULL OR name = $2)
ORDER BY name;

-- name: delete_ssh_key
DELETE FROM api.user_ssh_keys WHERE username = $1 AND name = $2 RETURNING name;
