-- Queries of the dashboard's pages. Every filter arrives as a parameter; a NULL one matches all.

-- name: dashboard_jobs_list
-- Newest first, keyset-paged on the primary key (`before`), so a page costs the same at any depth.
-- Ages are in seconds since enqueue, measured on the database clock.
WITH clock AS (
    SELECT statement_timestamp() AS now
)
SELECT id, queue, task, state::text AS state, attempt_count, max_attempts, last_error_code,
       ordering_key, created_at, finished_at, lease_owner, lease_token,
       extract(epoch FROM clock.now - created_at)::float8 AS age_seconds
FROM __schema__.jobs CROSS JOIN clock
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(state)s::text IS NULL OR state::text = %(state)s::text)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)
  AND (%(ordering_key)s::text IS NULL OR ordering_key = %(ordering_key)s::text)
  AND (%(older_than)s::float8 IS NULL
       OR created_at <= clock.now - make_interval(secs => %(older_than)s::float8))
  AND (%(newer_than)s::float8 IS NULL
       OR created_at > clock.now - make_interval(secs => %(newer_than)s::float8))
  AND (%(contains)s::jsonb IS NULL OR payload @> %(contains)s::jsonb)
  AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: dashboard_trouble_recent
-- Retries, lease expiries and fenced writes in each of the last %(minutes)s minutes (minute 0 is
-- the current one), from the audit log: what went wrong as the database saw it.
WITH clock AS (
    SELECT statement_timestamp() AS now
)
SELECT event,
       floor(extract(epoch FROM clock.now - at) / 60)::integer AS minutes_ago,
       count(*) AS events
FROM __schema__.job_events CROSS JOIN clock
WHERE event IN ('retry', 'lease_expired', 'fencing_lost')
  AND at > clock.now - make_interval(mins => %(minutes)s)
  AND at <= clock.now
GROUP BY event, minutes_ago
ORDER BY event, minutes_ago;

-- name: dashboard_dead_count
-- How many dead jobs a filter matches: all of them (%(cap)s NULL), shown before a bulk reprocess
-- by that filter; or no further than %(cap)s, what a refused bulk reprocess says matches now, at
-- a bounded cost however many have died.
SELECT count(*)::bigint AS jobs
FROM (
    SELECT 1
    FROM __schema__.jobs
    WHERE state = 'dead'
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR task = %(task)s::text)
      AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)
      AND (%(older_than)s::float8 IS NULL
           OR finished_at <= statement_timestamp() - make_interval(secs => %(older_than)s::float8))
    LIMIT %(cap)s::bigint
) matching;

-- name: dashboard_dead_by_error
-- The dead jobs grouped by queue, task and error code, largest group first: where to look.
SELECT queue, task, last_error_code, count(*)::bigint AS jobs, min(finished_at) AS first_dead,
       max(finished_at) AS last_dead
FROM __schema__.jobs
WHERE state = 'dead'
GROUP BY queue, task, last_error_code
ORDER BY jobs DESC, queue, task, last_error_code
LIMIT %(limit)s;
