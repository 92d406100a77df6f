-- How each node agent isolates its tasks, as it said when it registered: "sandbox"
-- (its own uid, namespaces, cgroups) or "none" (tasks run as the agent's user), a
-- sentence saying what that means there, and how many cores its machine really has
-- (a simulated node may advertise more: its tasks then share cores, and say so).
ALTER TABLE launcher.agents
    ADD COLUMN isolation text NOT NULL DEFAULT 'unknown',
    ADD COLUMN isolation_detail text NOT NULL DEFAULT '',
    ADD COLUMN machine_cpus integer NOT NULL DEFAULT 0;
