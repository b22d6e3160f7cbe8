-- Scheduled jobs: enqueued for a later run time, or waiting out a retry's backoff. They sit
-- outside the claim indexes, so a claim never walks past them, and are promoted to pending
-- when due. Waiting jobs whose wait has a deadline are woken by the same pass.

-- name: job_promote_due
-- Moves up to %(limit)s due scheduled jobs to pending, earliest first, and as many waiting jobs
-- whose wait's deadline has passed (the wait ends timed out: docs/waits.md), and notifies each
-- queue that received any once. SKIP LOCKED makes it safe for every worker to run at once.
-- Also returns when the next scheduled job or wait deadline is due, so the caller can sleep until
-- then.
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
), expired AS (
    -- A wait and its job are locked together, so a signal delivered meanwhile (which locks both)
    -- and this timeout cannot both end the wait.
    SELECT w.job_id, w.name, w.token, w.deadline
    FROM __schema__.job_waits w
    JOIN __schema__.jobs j ON j.id = w.job_id
    WHERE w.state = 'waiting'
      AND w.deadline <= (SELECT now FROM clock)
      AND j.state = 'waiting'
    ORDER BY w.deadline
    LIMIT %(limit)s
    FOR UPDATE OF w, j SKIP LOCKED
), timed_out AS (
    UPDATE __schema__.job_waits w
    SET state = 'timed_out', resolved_at = clock.now, swept = true
    FROM expired e CROSS JOIN clock
    WHERE w.job_id = e.job_id AND w.name = e.name
    RETURNING w.job_id
), woken AS (
    -- Due from its deadline (the job queues behind what was due before it, not behind the
    -- pass), and never later than the moment it was woken.
    UPDATE __schema__.jobs j
    SET state = 'pending', available_at = least(e.deadline, statement_timestamp())
    FROM expired e
    WHERE j.id = e.job_id
    RETURNING j.queue
), woken_logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, error, at)
    SELECT e.job_id, 'wait_timeout', 'waiting', 'pending', e.token,
           left(format('wait %%s reached its deadline', e.name), 2000), clock.now
    FROM expired e CROSS JOIN clock
), notified AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n
    FROM (SELECT queue FROM promoted UNION SELECT queue FROM woken) q
)
SELECT (SELECT count(*) FROM promoted) AS promoted,
       (SELECT count(*) FROM woken) AS waits_timed_out,
       (SELECT n FROM notified) AS queues_notified,
       least((SELECT min(available_at) FROM __schema__.jobs
              WHERE state = 'scheduled' AND available_at > (SELECT now FROM clock)),
             (SELECT min(deadline) FROM __schema__.job_waits
              WHERE state = 'waiting' AND deadline > (SELECT now FROM clock))) AS next_due,
       (SELECT now FROM clock) AS db_now;
