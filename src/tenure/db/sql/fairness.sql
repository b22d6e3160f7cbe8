-- Fairness (O3): priority aging keeps the claim's plain ORDER BY priority DESC, available_at, id
-- (and so its index), by raising the stored priority of jobs that have waited.

-- name: priority_age
-- Raises each pending job's priority by one step per %(step_seconds)s it has been claimable,
-- up to %(max_boost)s steps above the priority it was enqueued with. Every worker runs it, but
-- one pass at a time does the work: the others find the advisory lock taken and return at once
-- (the pass reads every pending row, so N workers must not do it N times). Rows a claim holds
-- are skipped, and a repeated pass changes nothing.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), gate AS (
    SELECT pg_try_advisory_xact_lock(hashtext(%(lock_space)s)) AS ours
), due AS (
    SELECT j.id,
           least(%(max_boost)s::int,
                 floor(extract(epoch FROM clock.now - j.available_at) / %(step_seconds)s::float8)::int,
                 32767 - j.priority + j.priority_boost) AS boost
    FROM __schema__.jobs j CROSS JOIN clock
    WHERE (SELECT ours FROM gate)
      AND j.state = 'pending'
      AND j.available_at <= clock.now - make_interval(secs => %(step_seconds)s::float8 * (j.priority_boost + 1))
      AND j.priority_boost < %(max_boost)s::int
      AND j.priority < 32767
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE __schema__.jobs j
SET priority = j.priority - j.priority_boost + due.boost,
    priority_boost = due.boost
FROM due
WHERE j.id = due.id
  AND j.state = 'pending'
  AND due.boost > j.priority_boost
RETURNING j.id, j.queue, j.priority, j.priority_boost;
