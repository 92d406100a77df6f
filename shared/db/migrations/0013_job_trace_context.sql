-- The W3C traceparent of the request that submitted a job. The scheduler decides in
-- cycles, not in the handler of the job's event, so it continues the job's trace from
-- here: submit -> schedule -> launch -> exit is one trace, retries and requeues included.
ALTER TABLE api.jobs ADD COLUMN traceparent text;
