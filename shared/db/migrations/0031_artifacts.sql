-- 0031 artifacts: what each task left in its output directory, and what a succeeded
-- job's declared outputs add up to.
--
-- Bytes live in the artifact store, content-addressed (shared/artifacts/store.py); these
-- tables hold manifests (each file's path, size and sha256). A node never writes them: it
-- uploads over the bus, and the launcher writes a task_outputs row only once every blob of
-- the upload is verified and stored (services/launcher/artifacts/), so a half upload
-- leaves no row. An attempt's row is also what its task's next attempt restores (a
-- preempted shard resumes where it stopped). When the launcher decides a job SUCCEEDED it
-- writes, in the same transaction, one artifacts row per declared output: the union of
-- the generation's succeeded attempts' files under the output's path.

CREATE TABLE launcher.task_outputs (
    attempt_id text PRIMARY KEY REFERENCES launcher.attempts (id),
    job_id text NOT NULL,
    task_role text NOT NULL,
    task_index integer NOT NULL,
    manifest jsonb NOT NULL,
    size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
    created_at timestamptz NOT NULL DEFAULT now()
);
-- The latest earlier outputs of a task (its checkpoint), and a job's at its success.
CREATE INDEX task_outputs_by_task ON launcher.task_outputs (job_id, task_role, task_index, created_at DESC);

CREATE TABLE launcher.artifacts (
    id text PRIMARY KEY CHECK (id ~ '^art-[0-9a-z]{26}$'),
    job_id text NOT NULL REFERENCES api.jobs (id),
    output text NOT NULL,
    manifest jsonb NOT NULL,
    files integer NOT NULL CHECK (files >= 0),
    size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
    sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, output)
);

GRANT SELECT, INSERT, UPDATE ON launcher.task_outputs TO corral_launcher;
GRANT SELECT, INSERT ON launcher.artifacts TO corral_launcher;
GRANT SELECT ON launcher.task_outputs, launcher.artifacts TO corral_api;
