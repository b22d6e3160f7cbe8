-- Per-key ordering, the operator's side: what blocks a key, and skipping a dead head.

-- name: ordering_blocked
-- Dead keyed jobs, with how many jobs of their key wait behind them. A dead job blocks its
-- key until it is reprocessed (and succeeds) or skipped.
SELECT d.id, d.ordering_key, d.queue, d.task, d.last_error_code, d.finished_at,
       (SELECT count(*) FROM __schema__.jobs w
        WHERE w.ordering_key = d.ordering_key AND w.state IN ('scheduled', 'pending') AND w.id > d.id)
           AS waiting
FROM __schema__.jobs d
WHERE d.state = 'dead'
  AND d.ordering_key IS NOT NULL
  AND (%(ordering_key)s::text IS NULL OR d.ordering_key = %(ordering_key)s::text)
ORDER BY d.finished_at, d.id
LIMIT %(limit)s;

-- name: ordering_skip
-- Skips a keyed job (dead, pending or scheduled) so the rest of its key can run: cancelled, with
-- the operator and the reason in the audit log.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), target AS (
    SELECT id, state FROM __schema__.jobs
    WHERE id = %(id)s AND ordering_key IS NOT NULL AND state IN ('scheduled', 'pending', 'dead')
    FOR UPDATE
), moved AS (
    UPDATE __schema__.jobs j
    SET state = 'cancelled', finished_at = clock.now
    FROM target t CROSS JOIN clock
    WHERE j.id = t.id
    RETURNING j.id, j.ordering_key, j.queue, t.state AS from_state, j.lease_token
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error_code, error, at)
    SELECT m.id, 'cancel', m.from_state, 'cancelled', m.lease_token, %(actor)s, 'ORDERING_SKIP',
           left(%(reason)s, 2000), clock.now
    FROM moved m CROSS JOIN clock
), notified AS (
    SELECT count(pg_notify(%(channel)s, m.queue)) AS n FROM moved m
)
SELECT moved.id, moved.ordering_key FROM moved CROSS JOIN notified;
