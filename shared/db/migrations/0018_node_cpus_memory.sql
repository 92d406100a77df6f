-- What a node offers tasks besides GPUs: CPU cores and memory (MiB), from its exporter
-- (0: not reported, and then nothing limits them). The scheduler places an instance only
-- where its resources.cpus and resources.memory_mb are free too.
ALTER TABLE monitor.nodes ADD COLUMN cpus double precision NOT NULL DEFAULT 0;
ALTER TABLE monitor.nodes ADD COLUMN memory_mb bigint NOT NULL DEFAULT 0;
