-- 0036 GPU sharing: which nodes share their GPUs, and the share each allocation holds.
--
-- A node's pool decides whether its GPUs may be shared and how (its exporter reports
-- it: CORRAL_GPU_SHARING): none (the default), timeslice, mps, hami or mig. The
-- scheduler places a task asking for a fraction of a GPU only on a node that shares
-- (services/scheduler/placement.py), on one GPU; gpu_milli is that share in thousandths
-- (0: the allocation holds its GPUs whole). A GPU holding shares is never given whole to
-- another job, so the allocations of one GPU are either one whole one or shares adding up
-- to at most 1000.

ALTER TABLE monitor.nodes
    ADD COLUMN gpu_sharing text NOT NULL DEFAULT 'none'
        CHECK (gpu_sharing IN ('none', 'timeslice', 'mps', 'hami', 'mig'));

ALTER TABLE scheduler.allocations
    ADD COLUMN gpu_milli integer NOT NULL DEFAULT 0
        CHECK (gpu_milli >= 0 AND gpu_milli < 1000 AND (gpu_milli = 0 OR cardinality(gpu_indices) = 1));
