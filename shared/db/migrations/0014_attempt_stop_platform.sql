-- Why the platform stopped an attempt (preempted, gpu_lost...), stored with the stop
-- request and not only in its event: an agent's reconcile loop that sees the request
-- before the event must classify the task's end the same way (transient, uncounted).
ALTER TABLE launcher.attempts ADD COLUMN stop_platform text;
