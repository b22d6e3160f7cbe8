-- 0015: the database refuses values no worker can process, so one bad row never costs more than
-- itself. A run time or creation time outside the years 1900 to 9000 (psycopg cannot read
-- 'infinity' or a year past 9999, and a scheduled job due at 'infinity' stopped every worker's
-- promoter); an attempt budget above the client's own bound (1000); and a unique key that is not
-- its own task's (a job of one task could hold another task's key and keep its jobs out).
-- In steps (migrate.py, STEP): the constraints are added NOT VALID (a moment's lock, no scan),
-- rows that break them are set aside in batches, and the constraints are validated last, which
-- scans without blocking writes. Every step can run again after a failure part-way.

ALTER TABLE __schema__.jobs DROP CONSTRAINT IF EXISTS jobs_times_in_range;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_times_in_range CHECK (
    available_at >= '1900-01-01 00:00:00+00' AND available_at < '9000-01-01 00:00:00+00'
    AND created_at >= '1900-01-01 00:00:00+00' AND created_at < '9000-01-01 00:00:00+00'
) NOT VALID;
ALTER TABLE __schema__.jobs DROP CONSTRAINT IF EXISTS jobs_attempts_bounded;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_attempts_bounded CHECK (max_attempts <= 1000) NOT VALID;
ALTER TABLE __schema__.jobs DROP CONSTRAINT IF EXISTS jobs_unique_key_of_its_task;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_unique_key_of_its_task CHECK (
    unique_key IS NULL OR starts_with(unique_key, task || ':')
) NOT VALID;

-- tenure: step
-- Rows written before these bounds that break one: their values are brought inside the bounds,
-- a foreign unique key is released, and a job still waiting or running is set aside as dead
-- with INVALID_ROW (and its audit record) for an operator to look at, instead of being run.
DO $$
DECLARE
    lo bigint;
    top bigint;
BEGIN
    SELECT min(id), max(id) INTO lo, top FROM __schema__.jobs;
    WHILE lo <= top LOOP
        WITH bad AS (
            SELECT id, state AS was FROM __schema__.jobs
            WHERE id >= lo AND id < lo + 10000
              AND NOT (available_at >= '1900-01-01 00:00:00+00' AND available_at < '9000-01-01 00:00:00+00'
                       AND created_at >= '1900-01-01 00:00:00+00' AND created_at < '9000-01-01 00:00:00+00'
                       AND max_attempts <= 1000
                       AND (unique_key IS NULL OR starts_with(unique_key, task || ':')))
            FOR UPDATE
        ), fixed AS (
            UPDATE __schema__.jobs j
            SET available_at = least(greatest(j.available_at, '1900-01-01 00:00:00+00'), '8999-12-31 00:00:00+00'),
                created_at = least(greatest(j.created_at, '1900-01-01 00:00:00+00'), '8999-12-31 00:00:00+00'),
                max_attempts = least(j.max_attempts, 1000),
                attempt_count = least(j.attempt_count, 1000),
                unique_key = CASE WHEN starts_with(j.unique_key, j.task || ':') THEN j.unique_key END,
                unique_states = CASE WHEN starts_with(j.unique_key, j.task || ':') THEN j.unique_states END,
                state = CASE WHEN b.was IN ('scheduled', 'pending', 'running') THEN 'dead' ELSE j.state END,
                finished_at = CASE WHEN b.was IN ('scheduled', 'pending', 'running') THEN now() ELSE j.finished_at END,
                lease_owner = NULL,
                lease_expires_at = NULL,
                lease_deadline = NULL,
                last_error_code = CASE WHEN b.was IN ('scheduled', 'pending', 'running') THEN 'INVALID_ROW'
                                       ELSE j.last_error_code END,
                last_error = CASE WHEN b.was IN ('scheduled', 'pending', 'running')
                                  THEN 'set aside on upgrade: a run time, creation time, attempt budget or unique '
                                       'key out of bounds (docs/guarantees.md, "One bad row")'
                                  ELSE j.last_error END
            FROM bad b
            WHERE j.id = b.id
            RETURNING j.id, j.lease_token, b.was, j.state
        )
        INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, error_code, error)
        SELECT f.id, 'dead', f.was, f.state, f.lease_token, 'INVALID_ROW', 'set aside on upgrade: out of bounds'
        FROM fixed f
        WHERE f.was IN ('scheduled', 'pending', 'running');
        COMMIT;
        lo := lo + 10000;
    END LOOP;
END
$$;

-- tenure: step
ALTER TABLE __schema__.jobs VALIDATE CONSTRAINT jobs_times_in_range;
-- tenure: step
ALTER TABLE __schema__.jobs VALIDATE CONSTRAINT jobs_attempts_bounded;
-- tenure: step
ALTER TABLE __schema__.jobs VALIDATE CONSTRAINT jobs_unique_key_of_its_task;
