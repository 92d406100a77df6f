-- A node agent's every statement: the launcher.node_* functions (migration 0025), each
-- for this node ($1) with its secret ($2), which its database role may call and nothing
-- else; agent/repository.py says what each is for.

-- name: register
SELECT launcher.node_register($1, $2, $3, $4, $5, $6);

-- name: renew_lease
SELECT launcher.node_renew_lease($1, $2, $3, $4);

-- name: claim_attempt
SELECT * FROM launcher.node_claim_attempt($1, $2, $3, $4);

-- name: mark_running
SELECT * FROM launcher.node_mark_running($1, $2, $3, $4, $5, $6,
                                         $7, $8, $9, $10, $11, $12,
                                         $13, $14, $15, $16, $17, $18);

-- name: mark_exited
SELECT launcher.node_mark_exited($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14);

-- name: live_attempts
SELECT * FROM launcher.node_live_attempts($1, $2);

-- name: attempt_states
SELECT * FROM launcher.node_attempt_states($1, $2, $3);

-- name: record_dead_letter
SELECT launcher.node_record_dead_letter($1, $2, $3, $4, $5, $6, $7, $8);

-- name: beat
SELECT launcher.node_beat($1, $2, $3, $4, $5);

-- name: goodbye
SELECT launcher.node_goodbye($1, $2, $3);

-- name: expired_task_logs
SELECT * FROM launcher.node_expired_task_logs($1, $2, $3, $4, $5, $6, $7);

-- name: set_readiness
-- Whether a running service task passes its readiness probe (services/launcher/agent/probes.py).
SELECT launcher.node_set_readiness($1, $2, $3, $4, $5);

-- name: record_gpu_use
-- What sharing tasks use of their GPU's memory, several at once (gpu_share/watch.py).
SELECT launcher.node_record_gpu_use($1, $2, $3, $4);

-- name: report_over_limit
-- A sharing task over its share of a GPU's memory (services/launcher/agent/gpu_share/watch.py).
SELECT launcher.node_report_over_limit($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- name: attempt_storage
-- The storage configs a STARTING attempt's job uses, as they are now (storage_mounts.py).
SELECT * FROM launcher.node_attempt_storage($1, $2, $3);

-- name: attempt_ssh
-- A STARTING attempt's ssh keys, for a generic job with `ssh` (services/launcher/agent/job_ssh/).
SELECT * FROM launcher.node_attempt_ssh($1, $2, $3);
