-- 0003 agent leases: a node agent may act for its node only while it holds a live lease.
--
-- Why: an agent that dies or loses contact must not keep its tasks hostage, and one that
-- comes back must not report for attempts the platform has already given up on. The
-- agent renews `lease_expires_at`; the launcher declares an agent lost once its lease has
-- expired, bumps `epoch` (the fence: the old agent's renewals and claims stop matching)
-- and ends that node's live attempts as LOST so their jobs are retried elsewhere.
-- Owned by the launcher (service and node agents).

CREATE TABLE launcher.agents (
    node_id text PRIMARY KEY,
    epoch bigint NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    lost_at timestamptz,
    registered_at timestamptz NOT NULL DEFAULT now()
);
