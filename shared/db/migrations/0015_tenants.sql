-- Tenants: users and groups, VC access lists, tokens with scopes and expiry, an audit log.
--
-- Until now a token carried a role ('admin' or 'user') and a bare username. The role
-- moves to the user, so a token can never carry more than its user may do: a token has
-- scopes (read, submit, admin) and the API grants the scopes its user may hold, no more.
-- Groups grant access to virtual clusters; a VC whose allowed_groups is NULL stays open to
-- every user, as every VC was before (the default VC among them).

CREATE TABLE api.users (
    name text PRIMARY KEY,
    role text NOT NULL CHECK (role IN ('admin', 'user')),
    display_name text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL DEFAULT 'corral'
);
-- Whoever holds a token today becomes a user: an admin if any of their tokens was one.
INSERT INTO api.users (name, role)
SELECT username, CASE WHEN bool_or(role = 'admin') THEN 'admin' ELSE 'user' END
FROM api.tokens GROUP BY username;

CREATE TABLE api.groups (
    name text PRIMARY KEY,
    description text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL
);

CREATE TABLE api.group_members (
    group_name text NOT NULL REFERENCES api.groups (name) ON DELETE CASCADE,
    username text NOT NULL REFERENCES api.users (name) ON DELETE CASCADE,
    added_at timestamptz NOT NULL DEFAULT now(),
    added_by text NOT NULL,
    PRIMARY KEY (group_name, username)
);
CREATE INDEX group_members_by_user ON api.group_members (username);

-- NULL: every user may use the VC; a list: members of those groups (admins always may).
-- Deleting a group removes it from every list in the same transaction (the API does).
ALTER TABLE api.virtual_clusters ADD COLUMN allowed_groups text[];

-- Existing tokens keep what they could do: an admin's all three scopes, a user's two.
ALTER TABLE api.tokens ADD COLUMN scopes text[] NOT NULL DEFAULT '{read,submit}'
    CHECK (cardinality(scopes) > 0 AND scopes <@ '{read,submit,admin}');
UPDATE api.tokens SET scopes = '{read,submit,admin}' WHERE role = 'admin';
ALTER TABLE api.tokens ALTER COLUMN scopes DROP DEFAULT;
ALTER TABLE api.tokens ADD COLUMN expires_at timestamptz;
ALTER TABLE api.tokens ADD COLUMN created_by text NOT NULL DEFAULT 'corral';
ALTER TABLE api.tokens DROP COLUMN role;
-- A deleted user's tokens go with them.
ALTER TABLE api.tokens ADD CONSTRAINT tokens_username_fkey
    FOREIGN KEY (username) REFERENCES api.users (name) ON DELETE CASCADE;
CREATE INDEX tokens_by_user ON api.tokens (username);

-- Every mutating API call, refused ones included: who (NULL when unauthenticated), with
-- which token, what (method, route template, target id), the status answered, from where.
CREATE TABLE api.audit_log (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    username text,
    token_id text,
    method text NOT NULL,
    route text NOT NULL,
    target text,
    status smallint NOT NULL,
    client text
);
CREATE INDEX audit_log_by_user ON api.audit_log (username, id);
CREATE INDEX audit_log_by_target ON api.audit_log (target, id) WHERE target IS NOT NULL;
