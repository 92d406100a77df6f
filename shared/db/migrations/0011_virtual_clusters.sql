-- Virtual clusters (queues) with guaranteed GPU quotas, and what the scheduler needs to
-- honour them: which allocations are borrowed beyond a quota (reclaimable), more reasons a
-- job waits, and when it is expected to start.

-- The API owns VC definitions (admins create and resize them at runtime); the scheduler
-- reads them every cycle. quota: guaranteed GPUs per GPU type, e.g. {"H100": 16}.
CREATE TABLE api.virtual_clusters (
    name text PRIMARY KEY,
    description text NOT NULL DEFAULT '',
    quota jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(quota) = 'object'),
    max_gpus_per_user integer CHECK (max_gpus_per_user IS NULL OR max_gpus_per_user >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL DEFAULT 'corral'
);
-- Every job names a VC; the one jobs get by default exists from the start (no quota: its
-- jobs run on idle GPUs). VCs jobs already named are kept, without quota.
INSERT INTO api.virtual_clusters (name, description)
VALUES ('default', 'jobs that name no virtual cluster; no guaranteed quota');
INSERT INTO api.virtual_clusters (name)
SELECT DISTINCT virtual_cluster FROM api.jobs ON CONFLICT (name) DO NOTHING;

ALTER TABLE scheduler.allocations ADD COLUMN borrowed boolean NOT NULL DEFAULT false;

ALTER TABLE scheduler.pending_status DROP CONSTRAINT pending_status_reason_check;
ALTER TABLE scheduler.pending_status ADD CONSTRAINT pending_status_reason_check CHECK (reason IN (
    'WaitingForQuota', 'WaitingForPreemption', 'UserLimit', 'InsufficientGPUs', 'GangDoesNotFit',
    'Fragmented', 'NodesUnhealthy', 'Priority'));
ALTER TABLE scheduler.pending_status ADD COLUMN estimated_start timestamptz;
