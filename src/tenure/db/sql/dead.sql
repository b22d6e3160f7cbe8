-- The dead-job workflow: search, reprocess many, purge past a retention age.
-- Filters are optional: NULL means "any". Ages are seconds before %(now)s (the database clock).

-- name: dead_search
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
SELECT id, queue, task, attempt_count, max_attempts, last_error_code,
       last_error, finished_at,
       extract(epoch FROM clock.now - finished_at)::float8 AS age_seconds
FROM __schema__.jobs CROSS JOIN clock
WHERE state = 'dead'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)
  AND (%(older_than)s::float8 IS NULL OR finished_at <= clock.now - make_interval(secs => %(older_than)s::float8))
ORDER BY finished_at DESC, id DESC
LIMIT %(limit)s;

-- name: dead_reprocess_many
-- Dead -> pending with a fresh budget, by ids or by filter; keeps ids, tokens and history, and
-- records who and why in the audit log. Rows are locked in id order; one NOTIFY per queue.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), target AS (
    SELECT j.id
    FROM __schema__.jobs j CROSS JOIN clock
    WHERE j.state = 'dead'
      AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
      AND (%(error_code)s::text IS NULL OR j.last_error_code = %(error_code)s::text)
      AND (%(older_than)s::float8 IS NULL
           OR j.finished_at <= clock.now - make_interval(secs => %(older_than)s::float8))
    ORDER BY j.id
    LIMIT %(limit)s
    FOR UPDATE OF j
), moved AS (
    UPDATE __schema__.jobs j
    SET state = 'pending',
        max_attempts = j.attempt_count + %(attempts)s,
        available_at = clock.now,
        finished_at = NULL
    FROM target t CROSS JOIN clock
    WHERE j.id = t.id
      AND j.state = 'dead'
    RETURNING j.id, j.lease_token, j.queue
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error, at)
    SELECT m.id, 'reprocess', 'dead', 'pending', m.lease_token, %(actor)s, %(reason)s, clock.now
    FROM moved m CROSS JOIN clock
), notified AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n FROM (SELECT DISTINCT queue FROM moved) q
)
SELECT moved.id, moved.queue FROM moved CROSS JOIN notified ORDER BY moved.id;

-- name: dead_purge
-- Deletes dead jobs dead for longer than %(older_than)s seconds, with their history, in a
-- bounded batch; only on an operator's explicit command or a configured dead retention.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), doomed AS (
    SELECT j.id
    FROM __schema__.jobs j CROSS JOIN clock
    WHERE j.state = 'dead'
      AND j.finished_at < clock.now - make_interval(secs => %(older_than)s::float8)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
    ORDER BY j.finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), history AS (
    DELETE FROM __schema__.job_events e USING doomed d WHERE e.job_id = d.id
)
DELETE FROM __schema__.jobs j
USING doomed d
WHERE j.id = d.id
  AND j.state = 'dead'
RETURNING j.id, j.queue;
