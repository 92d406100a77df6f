-- name: insert_audit
INSERT INTO api.audit_log (username, token_id, method, route, target, status, client)
VALUES ($1, $2, $3, $4, $5, $6, $7);

-- name: list_audit
-- Newest first; $1 is the cursor (the last id of the previous page) or NULL.
SELECT id, at, username, token_id, method, route, target, status, client
FROM api.audit_log
WHERE ($1::bigint IS NULL OR id < $1)
  AND ($2::text IS NULL OR username = $2)
  AND ($3::text IS NULL OR target = $3)
  AND ($4::text IS NULL OR method = $4)
  AND ($5::text IS NULL OR route = $5)
  AND ($6::timestamptz IS NULL OR at >= $6)
  AND ($7::timestamptz IS NULL OR at < $7)
  AND ($8::smallint IS NULL OR status >= $8)
ORDER BY id DESC
LIMIT $9;

-- name: forget_old_audit
-- At most $2 rows older than $1 seconds, oldest first: ids grow with time, so the primary
-- key walks them from the low end and stops at the first row young enough.
DELETE FROM api.audit_log
WHERE id IN (SELECT id FROM api.audit_log
             WHERE at < now() - make_interval(secs => $1) ORDER BY id LIMIT $2);
