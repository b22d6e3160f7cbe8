-- Service health: what a worker's services report. A worker whose services keep failing says so in the
-- registry (`tenure status`, metrics), and a stale lease holder leaves a `lease_lost` event
-- when it learns its lease is gone, so a job's history shows both sides of a takeover.

ALTER TABLE __schema__.workers ADD COLUMN failing jsonb;

-- NOT VALID: existing rows all satisfy the narrower rule this replaces, and validating would
-- hold the audit log's exclusive lock for a full scan of it, stalling every retry and failure.
ALTER TABLE __schema__.job_events DROP CONSTRAINT job_events_event_known;
ALTER TABLE __schema__.job_events ADD CONSTRAINT job_events_event_known CHECK (event IN (
    'retry', 'lease_expired', 'fencing_lost', 'dead', 'released', 'reprocess', 'cancel', 'lease_lost'
)) NOT VALID;
