-- 0032 models: named, versioned artifacts, and what each job took as its inputs.
--
-- A model is a name that a user owns (the first to register a version of it) and may
-- share with one group; each version points at one artifact (an output of a succeeded
-- job, launcher.artifacts) and remembers where it came from: the job, its output, the
-- version it was trained from. Versions are numbered 1, 2, ... per model: a register
-- locks the model's row, so two at once get distinct numbers. Nothing here is ever
-- rewritten: a version is what it was registered as, so a job that names mnist@3 reads
-- the same bytes today and next year.
--
-- A job's inputs are pinned at submit, in the job's insert transaction: the reference
-- as it now stands ('mnist@latest' becomes 'mnist@4'), the artifact it resolved to and
-- where it lands under $CORRAL_INPUT_DIR. The launcher reads them to place each input on
-- the nodes (it reads no model table: the artifact id is all it needs); the API reads
-- them as a version's lineage (what the job that produced it was trained from).

CREATE TABLE api.models (
    name text PRIMARY KEY CHECK (name ~ '^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$'),
    owner text NOT NULL,
    -- Members of this group may read and use the model too; a deleted group shares it no more.
    group_name text REFERENCES api.groups (name) ON DELETE SET NULL,
    description text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX models_by_owner ON api.models (owner, name);
CREATE INDEX models_by_group ON api.models (group_name, name) WHERE group_name IS NOT NULL;

CREATE TABLE api.model_versions (
    model text NOT NULL REFERENCES api.models (name) ON DELETE CASCADE,
    version integer NOT NULL CHECK (version >= 1),
    artifact_id text NOT NULL REFERENCES launcher.artifacts (id),
    source_job text NOT NULL,
    source_output text NOT NULL,
    parent_version integer,
    description text NOT NULL DEFAULT '',
    registered_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, version),
    FOREIGN KEY (model, parent_version) REFERENCES api.model_versions (model, version),
    CHECK (parent_version < version)
);
CREATE INDEX model_versions_by_artifact ON api.model_versions (artifact_id);

CREATE TABLE api.job_inputs (
    job_id text NOT NULL REFERENCES api.jobs (id) ON DELETE CASCADE,
    position integer NOT NULL CHECK (position >= 0),
    -- Pinned: 'mnist@3' or 'job-...:output'.
    ref text NOT NULL CHECK (ref ~ '^[a-z0-9][a-z0-9_-]*@[1-9][0-9]*$' OR ref ~ '^job-[0-9a-z]{26}:[a-z0-9_-]+$'),
    artifact_id text NOT NULL REFERENCES launcher.artifacts (id),
    -- Relative to $CORRAL_INPUT_DIR.
    path text NOT NULL,
    PRIMARY KEY (job_id, position)
);

-- FOR UPDATE on a model row (numbering its versions) needs UPDATE.
GRANT SELECT, INSERT, UPDATE ON api.models TO corral_api;
GRANT SELECT, INSERT ON api.model_versions TO corral_api;
GRANT SELECT, INSERT ON api.job_inputs TO corral_api;
GRANT SELECT ON api.job_inputs TO corral_launcher;
