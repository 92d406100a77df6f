-- 0040 Container runtimes: which nodes run task images.
--
-- A node's exporter reports the runtime its pool runs images with (CORRAL_CONTAINER_RUNTIME:
-- podman, docker or apptainer; '' for none). The scheduler places a job whose tasks name an
-- image only on nodes with one (or on a node run through Kubernetes, whose pods always run
-- their image), unless the job allows host execution; the API refuses such a job at submit
-- when no registered node could ever run it.

ALTER TABLE monitor.nodes
    ADD COLUMN container_runtime text NOT NULL DEFAULT ''
        CHECK (container_runtime IN ('', 'podman', 'docker', 'apptainer'));
