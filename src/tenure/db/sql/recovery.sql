-- name: lease_recover_expired
-- Expired leases go back to waiting with backoff (scheduled until it has passed), or to dead when
-- the budget is spent. SKIP LOCKED makes it safe for every worker to run this at once.
-- The retry backoff is the task's own where this worker knows the task (the policy arrays), else
-- the worker's default.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), policy AS (
    SELECT *
    FROM unnest(%(policy_tasks)s::text[], %(policy_bases)s::float8[], %(policy_caps)s::float8[],
                %(policy_jitters)s::float8[]) AS p(task, base, cap, jitter)
), expired AS (
    SELECT id, task, attempt_count, lease_owner, lease_token, lease_expires_at
    FROM __schema__.jobs
    WHERE state = 'running'
      AND lease_expires_at <= (SELECT now FROM clock)
    -- Exactly the order of jobs_running_expiry_idx: a tie-break on id would make PostgreSQL sort
    -- every expired lease before taking the first batch.
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), timed AS (
    -- Drawn once per job here, so the state and the run time below agree.
    SELECT e.*, (SELECT now FROM clock) + make_interval(secs => least(
               coalesce(p.cap, %(backoff_cap)s::float8),
               coalesce(p.base, %(backoff_base)s::float8) * power(2, least(e.attempt_count - 1, 60)))
               * (1 - coalesce(p.jitter, %(jitter)s::float8) * random())) AS retry_at
    FROM expired e LEFT JOIN policy p ON p.task = e.task
), recovered AS (
    UPDATE __schema__.jobs j
    SET state = CASE WHEN j.attempt_count >= j.max_attempts THEN 'dead'
                     WHEN e.retry_at > clock.now THEN 'scheduled'
                     ELSE 'pending' END::__schema__.job_state,
        available_at = CASE WHEN j.attempt_count >= j.max_attempts THEN j.available_at ELSE e.retry_at END,
        finished_at = CASE WHEN j.attempt_count >= j.max_attempts THEN clock.now END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        lease_deadline = NULL,
        last_error_code = 'LEASE_EXPIRED',
        last_error = 'lease of ' || left(e.lease_owner, 200) || ' (token ' || e.lease_token
                     || ') expired at ' || e.lease_expires_at || ' without a renewal: the worker died, '
                     || 'hung, lost the database, or the job reported no progress; call ctx.progress() '
                     || 'as work advances, or give the task a longer lease_seconds'
    FROM timed e CROSS JOIN clock
    WHERE j.id = e.id
      AND j.state = 'running'
      AND j.lease_token = e.lease_token
    RETURNING j.id, j.state, e.lease_owner, e.lease_token, j.queue, j.available_at
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error_code, at)
    SELECT r.id, 'lease_expired', 'running', r.state, r.lease_token, r.lease_owner, 'LEASE_EXPIRED', clock.now
    FROM recovered r CROSS JOIN clock
)
SELECT id, state::text AS state, lease_owner, lease_token, queue, available_at FROM recovered;
