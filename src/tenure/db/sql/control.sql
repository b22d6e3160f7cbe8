-- Job control: an operator's cancel, revoke, retry-now and queue pauses. Each is one
-- guarded statement, all or nothing, recorded in the history with who and why.

-- name: job_cancel_many
-- Cancels jobs by id or by filter. A running job is revoked: its lease ends here, in the
-- database, and its token moves on, so every later write of its holder is refused whatever the
-- handler does; the holder's worker is told on the notification channel it already listens on
-- (payload %(revoke_prefix)s<id>:<old token>). With %(requeue)s a running job goes back to
-- pending under a new token instead (the revoked attempt is not counted), for a worker that hangs.
-- Nothing changes when any id given cannot be cancelled ('refused' rows say which and why) or
-- when more than %(max_jobs)s jobs match (a 'too_many' row). With %(keyed)s only jobs with an
-- ordering key are taken (skipping a key's head: its event says %(event_code)s), and a cancelled
-- keyed job wakes its queue, whose next job of the key may run now.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), target AS (
    SELECT j.id, j.state, j.queue, j.lease_owner, j.lease_token, j.result_wanted, j.ordering_key
    FROM __schema__.jobs j CROSS JOIN clock
    WHERE (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))
      AND (NOT %(keyed)s::boolean OR j.ordering_key IS NOT NULL)
      AND (%(ids)s::bigint[] IS NOT NULL OR j.state = ANY(%(accept)s::__schema__.job_state[]))
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
      AND (%(contains)s::jsonb IS NULL OR j.payload @> %(contains)s::jsonb)
      AND (%(older_than)s::float8 IS NULL
           OR j.created_at <= clock.now - make_interval(secs => %(older_than)s::float8))
    ORDER BY j.id
    LIMIT %(max_jobs)s + 1
    FOR UPDATE OF j
), refused AS (
    SELECT i.id, t.state
    FROM unnest(coalesce(%(ids)s::bigint[], '{}'::bigint[])) AS i(id)
    LEFT JOIN target t ON t.id = i.id
    WHERE t.id IS NULL OR NOT (t.state = ANY(%(accept)s::__schema__.job_state[]))
), allowed AS (
    SELECT NOT EXISTS (SELECT 1 FROM refused) AND (SELECT count(*) FROM target) <= %(max_jobs)s AS ok
), moved AS (
    UPDATE __schema__.jobs j
    SET state = CASE WHEN %(requeue)s::boolean THEN 'pending' ELSE 'cancelled' END::__schema__.job_state,
        finished_at = CASE WHEN %(requeue)s::boolean THEN NULL ELSE clock.now END,
        available_at = CASE WHEN %(requeue)s::boolean THEN clock.now ELSE j.available_at END,
        attempt_count = CASE WHEN %(requeue)s::boolean THEN j.attempt_count - 1 ELSE j.attempt_count END,
        lease_token = CASE WHEN t.state = 'running' THEN j.lease_token + 1 ELSE j.lease_token END,
        lease_owner = NULL,
        lease_expires_at = NULL,
        lease_deadline = NULL,
        last_error_code = CASE WHEN %(requeue)s::boolean THEN 'REQUEUED'
                               WHEN t.state = 'running' THEN 'REVOKED' ELSE 'CANCELLED' END,
        last_error = left(%(reason)s, 2000)
    FROM target t CROSS JOIN clock CROSS JOIN allowed
    -- No test of j's state here: target holds the row locked as it is now (t), while this scan
    -- reads it as the statement's snapshot had it; a job whose state moved in between (a signal
    -- woke it, a claim took it) failed such a test and was silently left uncancelled.
    WHERE j.id = t.id
      AND t.state = ANY(%(accept)s::__schema__.job_state[])
      AND allowed.ok
    RETURNING j.id, j.queue, t.state AS from_state, j.state AS to_state, j.lease_token,
              t.lease_owner AS previous_owner, t.lease_token AS previous_token, t.result_wanted,
              t.ordering_key
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error_code, error, at)
    SELECT m.id, CASE WHEN m.from_state = 'running' THEN 'revoke' ELSE 'cancel' END, m.from_state,
           m.to_state, m.lease_token, %(actor)s,
           CASE WHEN m.from_state = 'running' THEN 'HELD_BY ' || left(m.previous_owner, 90)
                ELSE %(event_code)s END,
           left(%(reason)s, 2000), clock.now
    FROM moved m CROSS JOIN clock
), notified AS (
    SELECT count(pg_notify(n.channel, n.payload)) AS n
    FROM (SELECT %(channel)s AS channel, %(revoke_prefix)s || m.id || ':' || m.previous_token AS payload
          FROM moved m WHERE m.from_state = 'running'
          UNION
          SELECT %(channel)s, m.queue FROM moved m
          WHERE m.to_state = 'pending' OR m.ordering_key IS NOT NULL
          UNION
          SELECT %(results_channel)s, m.id::text FROM moved m
          WHERE m.result_wanted AND m.to_state = 'cancelled') n
)
SELECT m.id, m.queue, m.from_state::text AS from_state, m.to_state::text AS to_state,
       m.previous_owner, m.ordering_key, 'moved' AS outcome
FROM moved m CROSS JOIN notified
UNION ALL
SELECT r.id, NULL, r.state::text, NULL, NULL, NULL, 'refused' FROM refused r
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, 'too_many' FROM allowed
WHERE (SELECT count(*) FROM target) > %(max_jobs)s
ORDER BY 1;

-- name: job_retry_many
-- Runs jobs now: a scheduled or pending job's run time moves to now; a dead or cancelled job is
-- reprocessed with a budget of %(attempts)s more attempts. All or nothing, like job_cancel_many:
-- a running or succeeded job, or an unknown id, refuses the whole call.
-- The jobs given and the waiting and running jobs of their ordering keys are locked first, in id
-- order: a cancelled head brought back while a later job of its key is being claimed by a
-- transaction not yet committed would be claimed beside it, and run out of its key's order.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), key_rows AS (
    SELECT o.id FROM __schema__.jobs o
    WHERE o.ordering_key IN (SELECT k.ordering_key FROM __schema__.jobs k
                             WHERE k.id = ANY(%(ids)s::bigint[]) AND k.ordering_key IS NOT NULL
                               AND k.state IN ('dead', 'cancelled'))
      AND (o.id = ANY(%(ids)s::bigint[]) OR o.state IN ('scheduled', 'pending', 'running'))
    ORDER BY o.id
    FOR UPDATE
), target AS (
    SELECT j.id, j.state
    FROM __schema__.jobs j
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND (SELECT count(*) FROM key_rows) >= 0
    ORDER BY j.id
    FOR UPDATE OF j
), refused AS (
    SELECT i.id, t.state
    FROM unnest(%(ids)s::bigint[]) AS i(id)
    LEFT JOIN target t ON t.id = i.id
    WHERE t.id IS NULL OR t.state NOT IN ('scheduled', 'pending', 'dead', 'cancelled')
), moved AS (
    UPDATE __schema__.jobs j
    SET state = 'pending',
        available_at = clock.now,
        finished_at = NULL,
        max_attempts = CASE WHEN t.state IN ('dead', 'cancelled') THEN j.attempt_count + %(attempts)s
                            ELSE j.max_attempts END
    FROM target t CROSS JOIN clock
    -- No test of j's state: target holds the row locked as it is now (see job_cancel_many).
    WHERE j.id = t.id
      AND NOT EXISTS (SELECT 1 FROM refused)
    RETURNING j.id, j.queue, t.state AS from_state, j.lease_token
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error, at)
    SELECT m.id, CASE WHEN m.from_state IN ('dead', 'cancelled') THEN 'reprocess' ELSE 'retry_now' END,
           m.from_state, 'pending', m.lease_token, %(actor)s, left(%(reason)s, 2000), clock.now
    FROM moved m CROSS JOIN clock
), notified AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n FROM (SELECT DISTINCT queue FROM moved) q
)
SELECT m.id, m.from_state::text AS from_state, 'moved' AS outcome FROM moved m CROSS JOIN notified
UNION ALL
SELECT r.id, r.state::text, 'refused' FROM refused r
ORDER BY 1;

-- name: queue_pause
-- Pauses a queue for every worker on every host: the claim checks the pause on each claim, so
-- no claim from it starts once this commits (running jobs finish). Until %(until)s, or until
-- resumed when NULL. A queue nobody serves and no job names is refused unless %(allow_unknown)s.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), known AS (
    SELECT %(allow_unknown)s::boolean
        OR EXISTS (SELECT 1 FROM __schema__.jobs WHERE queue = %(queue)s)
        OR EXISTS (SELECT 1 FROM __schema__.workers WHERE %(queue)s = ANY(queues))
        OR EXISTS (SELECT 1 FROM __schema__.queue_pauses WHERE queue = %(queue)s) AS ok
), paused AS (
    INSERT INTO __schema__.queue_pauses (queue, paused_at, until, actor, reason)
    SELECT %(queue)s, clock.now, %(until)s, %(actor)s, %(reason)s
    FROM clock CROSS JOIN known
    WHERE known.ok
    ON CONFLICT (queue) DO UPDATE
        SET paused_at = EXCLUDED.paused_at, until = EXCLUDED.until, actor = EXCLUDED.actor,
            reason = EXCLUDED.reason
    RETURNING queue, paused_at, until
), logged AS (
    INSERT INTO __schema__.queue_events (queue, event, until, actor, reason, at)
    SELECT p.queue, 'pause', p.until, %(actor)s, %(reason)s, p.paused_at FROM paused p
)
SELECT known.ok AS known, p.queue, p.paused_at, p.until
FROM known LEFT JOIN paused p ON true;

-- name: queue_resume
-- Ends a queue's pause and wakes its workers. A pause whose time has passed is over already:
-- its row is removed, but nothing is logged or woken, and was_in_effect says so.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), resumed AS (
    DELETE FROM __schema__.queue_pauses WHERE queue = %(queue)s
    RETURNING queue, until, (until IS NULL OR until > (SELECT now FROM clock)) AS was_in_effect
), logged AS (
    INSERT INTO __schema__.queue_events (queue, event, actor, reason, at)
    SELECT r.queue, 'resume', %(actor)s, %(reason)s, clock.now FROM resumed r CROSS JOIN clock
    WHERE r.was_in_effect
), notified AS (
    SELECT count(pg_notify(%(channel)s, r.queue)) AS n FROM resumed r WHERE r.was_in_effect
)
SELECT r.queue, r.was_in_effect FROM resumed r CROSS JOIN notified;

-- name: queue_pauses_list
-- Pauses in effect (a pause whose time has passed is over, and not listed).
SELECT p.queue, p.paused_at, p.until, p.actor, p.reason, clock.now AS db_now
FROM __schema__.queue_pauses p
CROSS JOIN (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) clock
WHERE p.until IS NULL OR p.until > clock.now
ORDER BY p.queue;

-- name: job_result_get
-- What a caller waiting for a job needs: its state, result (and task, whose return annotation
-- may say its type) and last error. A waited-for job
-- that succeeded always has a result (JSON null for none); SQL NULL there means its handler
-- completed in its own transaction and the result is still on its way (job_result_set).
SELECT id, task, state::text AS state, result, result_wanted,
       result IS NULL AND result_wanted AS result_pending,
       last_error_code, last_error,
       extract(epoch FROM statement_timestamp() - finished_at)::float8 AS finished_seconds_ago
FROM __schema__.jobs
WHERE id = %(id)s;

-- name: unique_key_jobs
-- The jobs that carry a unique key (as the enqueue reported it; a period's windows are stored
-- as key@N), newest first, and whether each holds it now.
SELECT id, state::text AS state, unique_key, state = ANY(unique_states) AS holds, created_at,
       finished_at
FROM __schema__.jobs
WHERE unique_key = %(key)s OR unique_key LIKE replace(replace(%(key)s, '\', '\\'), '%%', '\%%') || '@%%'
ORDER BY id DESC
LIMIT %(limit)s;

-- name: queue_limit_declare
-- A worker's app declares a queue's limits; the last declaration wins. The bucket starts
-- full, and keeps its tokens while the rate stays the same.
INSERT INTO __schema__.queue_limits AS l (queue, max_running, key_field, max_running_per_key, rate,
                                          per_seconds, tokens, refilled_at, declared_by, updated_at)
VALUES (%(queue)s, %(max_running)s::integer, %(key_field)s, %(max_running_per_key)s::integer,
        %(rate)s::integer, %(per_seconds)s::float8, %(rate)s::integer::float8,
        CASE WHEN %(rate)s::integer IS NULL THEN NULL ELSE statement_timestamp() END,
        %(declared_by)s, statement_timestamp())
ON CONFLICT (queue) DO UPDATE
SET max_running = EXCLUDED.max_running,
    key_field = EXCLUDED.key_field,
    max_running_per_key = EXCLUDED.max_running_per_key,
    tokens = CASE WHEN l.rate IS NOT DISTINCT FROM EXCLUDED.rate
                   AND l.per_seconds IS NOT DISTINCT FROM EXCLUDED.per_seconds THEN l.tokens
                  ELSE EXCLUDED.tokens END,
    refilled_at = CASE WHEN l.rate IS NOT DISTINCT FROM EXCLUDED.rate
                        AND l.per_seconds IS NOT DISTINCT FROM EXCLUDED.per_seconds THEN l.refilled_at
                       ELSE EXCLUDED.refilled_at END,
    rate = EXCLUDED.rate,
    per_seconds = EXCLUDED.per_seconds,
    declared_by = EXCLUDED.declared_by,
    updated_at = EXCLUDED.updated_at;

-- name: queue_limit_clear
DELETE FROM __schema__.queue_limits WHERE queue = %(queue)s RETURNING queue;

-- name: queue_limits_list
-- Every limited queue, with its live leases (the slots in use) now.
WITH clock AS (
    SELECT statement_timestamp() AS now
)
SELECT l.queue, l.max_running, l.key_field, l.max_running_per_key, l.rate, l.per_seconds,
       l.declared_by, l.updated_at,
       (SELECT count(*) FROM __schema__.jobs r
        WHERE r.state = 'running' AND r.queue = l.queue AND r.lease_expires_at > clock.now) AS running
FROM __schema__.queue_limits l CROSS JOIN clock
ORDER BY l.queue;
