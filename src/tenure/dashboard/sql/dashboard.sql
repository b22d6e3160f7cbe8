-- Queries of the dashboard's pages. Every filter arrives as a parameter; a NULL one matches all.

-- name: dashboard_jobs_list
-- Newest first, keyset-paged on the primary key (`before`), so a page costs the same at any depth.
SELECT id, queue, task, state::text AS state, attempt_count, max_attempts, last_error_code,
       ordering_key, created_at, finished_at, lease_owner, lease_token
FROM __schema__.jobs
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
  AND (%(state)s::text IS NULL OR state::text = %(state)s::text)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)
  AND (%(contains)s::jsonb IS NULL OR payload @> %(contains)s::jsonb)
  AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: dashboard_queue_counts
-- Every state per queue, finished ones included, for the overview's table.
SELECT queue, state::text AS state, count(*)::bigint AS jobs
FROM __schema__.jobs
GROUP BY queue, state
ORDER BY queue, state;
