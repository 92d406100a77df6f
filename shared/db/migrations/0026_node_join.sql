-- 0026 node join: machines join as nodes with one-time tokens, and get bus identities of
-- their own; integrators get read-only bus identities.
--
-- A join token (`corral node token`, kubeadm-join style) is kept as its SHA-256 and may be
-- used once, before it expires. Using it (`corral node join`) mints the node's bus
-- identity (api.bus_credentials) and its database secret (launcher.node_credentials, 0025).
-- api.bus_credentials holds bcrypt hashes only: the stack's NATS admits exactly the
-- unrevoked rows on top of its own users (corral/local/bus_users.py), and a revoked row
-- also shuts out a user of the stack's own of that name (a removed node of `make up`).

CREATE TABLE api.join_tokens (
    id text PRIMARY KEY,
    secret_sha256 text NOT NULL CHECK (secret_sha256 ~ '^[0-9a-f]{64}$'),
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at timestamptz,
    used_by_node text
);

CREATE TABLE api.bus_credentials (
    user_name text PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('node', 'integrator')),
    node_id text,
    streams text[] NOT NULL DEFAULT '{}',
    password_hash text NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz,
    CHECK ((kind = 'node') = (node_id IS NOT NULL))
);

-- The API mints and revokes them (admins only, and a join token's holder once).
GRANT SELECT, INSERT, UPDATE ON api.join_tokens, api.bus_credentials, launcher.node_credentials TO corral_api;
