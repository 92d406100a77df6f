"""Jobs: submit (JSON, YAML, OpenPAI v2), dry run, list, read, cancel, resubmit, tags,
a job's events and its tasks' logs."""
