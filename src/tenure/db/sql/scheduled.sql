-- Scheduled jobs: enqueued for a later run time, or waiting out a retry's backoff. They sit
-- outside the claim indexes, so a claim never walks past them, and are promoted to pending
-- when due.

-- name: job_promote_due
-- Moves up to %(limit)s due scheduled jobs to pending, earliest first, and notifies each queue
-- that received any once. SKIP LOCKED makes it safe for every worker to run at once.
-- Also returns when the next scheduled job is due, so the caller can sleep until then.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), due AS (
    SELECT id
    FROM __schema__.jobs
    WHERE state = 'scheduled'
      AND available_at <= (SELECT now FROM clock)
    ORDER BY available_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE __schema__.jobs j
    SET state = 'pending'
    -- By primary key, whatever the batch: a join here lets the planner hash every scheduled row.
    WHERE j.id = ANY(ARRAY(SELECT id FROM due))
      AND j.state = 'scheduled'
    RETURNING j.queue
), notified AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n FROM (SELECT DISTINCT queue FROM promoted) q
)
SELECT (SELECT count(*) FROM promoted) AS promoted,
       (SELECT n FROM notified) AS queues_notified,
       (SELECT min(available_at) FROM __schema__.jobs
        WHERE state = 'scheduled' AND available_at > (SELECT now FROM clock)) AS next_due,
       (SELECT now FROM clock) AS db_now;
