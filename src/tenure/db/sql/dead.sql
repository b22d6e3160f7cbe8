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

-- name: dead_matching
-- The dead jobs a reprocess by filter takes (by ids and/or filter), locked in id order until the
-- transaction ends, so that job_retry_many, the one statement that moves a job back to pending,
-- finds each of them still dead.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
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
FOR UPDATE OF j;

-- name: dead_purge
-- Deletes dead jobs dead for longer than %(older_than)s seconds, with their history, in a
-- bounded batch; only on an operator's explicit command or a configured dead retention.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), doomed AS (
    SELECT j.id, j.state
    FROM __schema__.jobs j CROSS JOIN clock
    WHERE j.state = 'dead'
      AND j.finished_at < clock.now - make_interval(secs => %(older_than)s::float8)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
    ORDER BY j.finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), __part_doomed_deleted__;
