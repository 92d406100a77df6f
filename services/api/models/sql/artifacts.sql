-- name: job_brief
-- A job as artifacts need it: whose it is, whether it succeeded.
SELECT id, username, state FROM api.jobs WHERE id = $1;

-- name: artifacts_of_job
SELECT id, job_id, output, files, size_bytes, sha256, created_at
FROM launcher.artifacts WHERE job_id = $1 ORDER BY output;

-- name: artifact_of_output
SELECT id, job_id, output, files, size_bytes, sha256, created_at
FROM launcher.artifacts WHERE job_id = $1 AND output = $2;

-- name: get_artifact
SELECT id, job_id, output, files, size_bytes, sha256, created_at, manifest
FROM launcher.artifacts WHERE id = $1;

-- name: artifact_readable_as_model
-- Whether the reader ($2, admin: $3) may read a model with a version of artifact $1: such
-- readers may see what the version holds without reading the job that made it.
SELECT EXISTS (
    SELECT 1 FROM api.model_versions v JOIN api.models m ON m.name = v.model
    WHERE v.artifact_id = $1
      AND ($3 OR m.owner = $2
           OR m.group_name IN (SELECT group_name FROM api.group_members WHERE username = $2))
);

-- name: inputs_of_job
SELECT position, ref, artifact_id, path FROM api.job_inputs WHERE job_id = $1 ORDER BY position;

-- name: insert_job_inputs
INSERT INTO api.job_inputs (job_id, position, ref, artifact_id, path)
SELECT $1, p.position, p.ref, p.artifact_id, p.path
FROM unnest($2::integer[], $3::text[], $4::text[], $5::text[]) AS p(position, ref, artifact_id, path);
