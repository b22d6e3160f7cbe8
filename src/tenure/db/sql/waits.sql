-- Waits and signals (docs/waits.md): a handler's wait for a signal or a time, with no slot and no
-- lease held while it waits. Sending a signal is the signal() function (migration 0025), the one
-- way in for every role; its delivery, and the sweep that matches what a race left unmatched,
-- live there too. The promotion pass ends waits at their deadline (waits_expire_due).

-- name: job_wait
-- A handler's wait, named %(name)s within its job: one statement for each of its endings.
-- - 'resolved': an earlier attempt of this job began this wait and it has ended (signalled, timed
--   out, or ended by an operator): how, and the signal delivered, if any. Nothing is written.
-- - 'signalled': a signal to %(key)s was in the mailbox: it is this job's from now on (every later
--   attempt finds it here), and the handler goes on without leaving `running`.
-- - 'waiting': the job leaves `running` for `waiting` under the fence, its lease ended and its
--   attempt not counted (as a snooze), until a signal to %(key)s, or %(timeout)s seconds (NULL:
--   no deadline; a sleep has no key and only a deadline). A job unique while running holds its
--   key while waiting too.
-- - 'keyed': the job has an ordering key, and a keyed job may not wait: the claim's look at a key's
--   jobs does not read waiting ones, so the key's next job would run meanwhile. Nothing written.
-- - 'busy': the job's row, or the kept signal to %(key)s, is locked elsewhere (the recovery pass
--   looking at a fresh signal, say): try again. Waiting then would leave that signal behind until
--   the next recovery pass. Nothing written.
-- - 'lost': the fence does not hold.
-- A wait a cancelled earlier run left behind (the job was reprocessed) begins again.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), earlier AS (
    SELECT w.state, w.since, w.resolved_at, w.signal_id, w.ended_by
    FROM __schema__.job_waits w
    WHERE w.job_id = %(id)s AND w.name = %(name)s AND w.state IN ('signalled', 'timed_out', 'ended')
), lease AS (
    SELECT j.id, j.queue, j.ordering_key IS NOT NULL AS keyed
    FROM __schema__.jobs j CROSS JOIN clock
    WHERE __part_attempt_holds__
      AND NOT EXISTS (SELECT 1 FROM earlier)
    FOR UPDATE OF j SKIP LOCKED
), kept AS (
    -- Kept until a time signal() set by the database's own clock, so judged by it too.
    SELECT s.id FROM __schema__.signals s
    WHERE s.key = %(key)s AND s.job_id IS NULL AND s.expires_at > statement_timestamp()
      AND EXISTS (SELECT 1 FROM lease WHERE NOT keyed)
    ORDER BY s.id
    LIMIT 1
), mail AS (
    SELECT s.id, s.payload, s.sent_at
    FROM __schema__.signals s
    WHERE s.id = (SELECT id FROM kept) AND s.job_id IS NULL
    FOR UPDATE SKIP LOCKED
), passed_over AS (
    SELECT EXISTS (SELECT 1 FROM kept) AND NOT EXISTS (SELECT 1 FROM mail) AS yes
), taken AS (
    UPDATE __schema__.signals s
    SET job_id = %(id)s, delivered_at = clock.now, swept = true
    FROM mail m CROSS JOIN clock
    WHERE s.id = m.id
    RETURNING s.id
), recorded AS (
    INSERT INTO __schema__.job_waits AS w (job_id, name, queue, key, state, since, deadline, token, signal_id,
                                           resolved_at, swept)
    SELECT l.id, %(name)s, l.queue, %(key)s, CASE WHEN m.id IS NULL THEN 'waiting' ELSE 'signalled' END, clock.now,
           clock.now + make_interval(secs => %(timeout)s::float8), %(token)s, m.id,
           CASE WHEN m.id IS NOT NULL THEN clock.now END, m.id IS NOT NULL
    FROM lease l CROSS JOIN clock LEFT JOIN mail m ON true
    WHERE NOT l.keyed AND NOT (SELECT yes FROM passed_over)
    ON CONFLICT (job_id, name) DO UPDATE
    SET key = excluded.key, state = excluded.state, since = excluded.since, deadline = excluded.deadline,
        token = excluded.token, signal_id = excluded.signal_id, resolved_at = excluded.resolved_at,
        ended_by = NULL, swept = excluded.swept
    RETURNING w.state
), moved AS (
    UPDATE __schema__.jobs j
    SET state = 'waiting',
        attempt_count = j.attempt_count - 1,
        lease_owner = NULL,
        lease_expires_at = NULL,
        lease_deadline = NULL,
        -- Jobs enqueued before waits existed name running but not waiting among the states they
        -- hold their unique key in; a wait is part of running.
        unique_states = CASE WHEN j.unique_states @> ARRAY['running']::__schema__.job_state[]
                                  AND NOT j.unique_states @> ARRAY['waiting']::__schema__.job_state[]
                             THEN j.unique_states || 'waiting'::__schema__.job_state
                             ELSE j.unique_states END
    FROM lease l
    WHERE j.id = l.id
      AND NOT l.keyed
      AND NOT EXISTS (SELECT 1 FROM kept)
    RETURNING j.id
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error, at)
    SELECT m.id, 'wait', 'running', 'waiting', %(token)s, %(owner)s,
           left(format('wait %%s for %%s until %%s', %(name)s, coalesce('a signal to ' || %(key)s, 'a time'),
                       coalesce((clock.now + make_interval(secs => %(timeout)s::float8))::text, 'no deadline')),
                2000),
           clock.now
    FROM moved m CROSS JOIN clock
), verdict AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM earlier) THEN 'resolved'
                WHEN EXISTS (SELECT 1 FROM lease WHERE keyed) THEN 'keyed'
                WHEN EXISTS (SELECT 1 FROM taken) THEN 'signalled'
                WHEN EXISTS (SELECT 1 FROM moved) THEN 'waiting'
                WHEN EXISTS (
                    SELECT 1 FROM __schema__.jobs j CROSS JOIN clock
                    WHERE __part_attempt_holds__) THEN 'busy'
                ELSE 'lost' END AS outcome
), lost AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, token, worker, error_code, at)
    SELECT %(id)s, 'fencing_lost', 'running', %(token)s, %(owner)s, 'FENCED_WAIT', clock.now
    FROM clock CROSS JOIN verdict
    WHERE verdict.outcome = 'lost'
)
SELECT v.outcome,
       coalesce(e.state, CASE WHEN m.id IS NOT NULL THEN 'signalled' END) AS state,
       coalesce(e.signal_id, m.id) AS signal_id,
       coalesce(s.payload, m.payload) AS payload,
       coalesce(s.sent_at, m.sent_at) AS sent_at,
       e.ended_by
FROM verdict v
CROSS JOIN (SELECT count(*) FROM recorded) r
LEFT JOIN earlier e ON true
LEFT JOIN mail m ON true
LEFT JOIN __schema__.signals s ON s.id = e.signal_id;

-- name: wait_end
-- An operator ends job %(id)s's wait: the job goes pending at once, and its handler's wait
-- returns as ended (not signalled, not timed out), by %(actor)s for %(reason)s. Nothing happens
-- to a job that is not waiting (no row).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), target AS (
    SELECT w.job_id, w.name, w.token, j.queue
    FROM __schema__.job_waits w JOIN __schema__.jobs j ON j.id = w.job_id
    WHERE w.job_id = %(id)s AND w.state = 'waiting' AND j.state = 'waiting'
    FOR UPDATE OF w, j
), ended AS (
    UPDATE __schema__.job_waits w
    SET state = 'ended', resolved_at = clock.now, ended_by = left(%(actor)s::text, 200), swept = true
    FROM target t CROSS JOIN clock
    WHERE w.job_id = t.job_id AND w.name = t.name
    RETURNING w.job_id
), woken AS (
    UPDATE __schema__.jobs j
    SET state = 'pending', available_at = clock.now
    FROM target t CROSS JOIN clock
    WHERE j.id = t.job_id
    RETURNING j.id, j.queue
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error, at)
    SELECT t.job_id, 'wait_ended', 'waiting', 'pending', t.token, %(actor)s,
           left(format('wait %%s ended: %%s', t.name, %(reason)s::text), 2000), clock.now
    FROM target t CROSS JOIN clock
), notified AS (
    SELECT count(pg_notify(%(channel)s, w.queue)) AS n FROM woken w
)
SELECT t.job_id, t.name FROM target t CROSS JOIN notified CROSS JOIN (SELECT count(*) FROM ended) e;

-- name: job_waits_of
-- Every wait job %(id)s began, oldest first, with the signal delivered to each.
SELECT w.name, w.key, w.state, w.since, w.deadline, w.token, w.resolved_at, w.ended_by,
       w.signal_id, s.payload, s.sent_at, s.sent_by
FROM __schema__.job_waits w
LEFT JOIN __schema__.signals s ON s.id = w.signal_id
WHERE w.job_id = %(id)s
ORDER BY w.since, w.name;

-- name: waits_list
-- Jobs waiting now, longest first: what each waits for and until when (at most %(limit)s), of
-- %(queue)s when given.
SELECT w.job_id, j.queue, j.task, w.name, w.key, w.since, w.deadline,
       coalesce(%(now)s::timestamptz, statement_timestamp()) AS db_now
FROM __schema__.job_waits w
JOIN __schema__.jobs j ON j.id = w.job_id
WHERE w.state = 'waiting' AND j.state = 'waiting'
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
ORDER BY w.since, w.job_id
LIMIT %(limit)s;

-- name: signal_send
-- One signal through signal(), in the caller's transaction.
SELECT signal_id, outcome, job_id
FROM __schema__.signal(%(key)s, %(payload)s::jsonb, %(idempotency_key)s, %(keep_seconds)s::float8,
                       %(sender)s::text, %(note)s::text);

-- name: signals_sweep_run
-- The recovery pass's part for signals (signals_sweep in migration 0025).
SELECT delivered, expired FROM __schema__.signals_sweep(%(batch)s);

-- name: signals_summary
-- The mailbox at a glance: signals kept for a waiter, the oldest of them, those delivered, and
-- those dropped undelivered since the schema was made.
SELECT (SELECT count(*) FROM __schema__.signals WHERE job_id IS NULL) AS kept,
       (SELECT min(sent_at) FROM __schema__.signals WHERE job_id IS NULL) AS oldest_kept_at,
       (SELECT count(*) FROM __schema__.signals WHERE job_id IS NOT NULL) AS delivered,
       coalesce((SELECT expired FROM __schema__.signal_totals), 0) AS expired,
       (SELECT count(*) FROM __schema__.job_waits WHERE state = 'waiting') AS waiting;

-- name: waits_expire_due
-- Ends up to %(limit)s waits whose deadline has passed, earliest first: each wait times out, its
-- job goes pending (due from its deadline, never later than now) and its queue is told once. Up
-- to %(limit)s more, whose deadline skips or cancels their job, are ended by
-- waits_due_to_skip_or_cancel(). A
-- wait and its job are both locked before either changes, so a signal delivered meanwhile (which
-- locks both) and this timeout cannot both end the wait. Also returns when the next deadline is due, so the
-- promotion pass can sleep until then. SKIP LOCKED: safe in every worker at once.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), due AS (
    -- The waits first, through their deadline index alone: joined to jobs in one scan, the planner
    -- (which cannot see the clock's value) took a third of the waits for due and read every
    -- pending job to find their rows (50,000 rows a pass beside 5,000 waits).
    SELECT w.job_id, w.name, w.token, w.deadline
    FROM __schema__.job_waits w
    WHERE w.state = 'waiting'
      AND w.deadline <= (SELECT now FROM clock)
      AND w.on_deadline = 'resume'
    ORDER BY w.deadline
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), held AS (
    -- Then their jobs, by primary key, still waiting and not locked elsewhere.
    SELECT j.id
    FROM __schema__.jobs j
    WHERE j.id = ANY(ARRAY(SELECT job_id FROM due))
      AND j.state = 'waiting'
    FOR UPDATE SKIP LOCKED
), expired AS MATERIALIZED (
    SELECT d.* FROM due d WHERE d.job_id IN (SELECT id FROM held)
), timed_out AS (
    -- By primary key, not joined: a job has one waiting wait, the one not yet resolved. Written
    -- as `resolved_at IS NULL`, not `state = 'waiting'`, which the planner answered through the
    -- partial index of every waiting wait (job_waits_queue_idx), reading all of them.
    UPDATE __schema__.job_waits w
    SET state = 'timed_out', resolved_at = clock.now, swept = true
    FROM clock
    WHERE w.job_id = ANY(ARRAY(SELECT job_id FROM expired))
      AND w.resolved_at IS NULL
    RETURNING w.job_id
), woken AS (
    UPDATE __schema__.jobs j
    SET state = 'pending',
        available_at = least((SELECT e.deadline FROM expired e WHERE e.job_id = j.id), statement_timestamp())
    WHERE j.id = ANY(ARRAY(SELECT job_id FROM expired))
    RETURNING j.queue
), logged AS (
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, error, at)
    SELECT e.job_id, 'wait_timeout', 'waiting', 'pending', e.token,
           left(format('wait %%s reached its deadline', e.name), 2000), clock.now
    FROM expired e CROSS JOIN clock
), notified AS (
    SELECT count(pg_notify(%(channel)s, q.queue)) AS n FROM (SELECT DISTINCT queue FROM woken) q
), skipped_or_cancelled AS (
    -- The waits whose deadline skips or cancels their job (a step's condition): apart from these,
    -- as a cancel is the admin's (migration 0026).
    SELECT __schema__.waits_due_to_skip_or_cancel(%(limit)s, (SELECT now FROM clock)) AS n
)
SELECT (SELECT count(*) FROM timed_out) + (SELECT n FROM skipped_or_cancelled) AS timed_out,
       (SELECT n FROM notified) AS queues_notified,
       (SELECT min(deadline) FROM __schema__.job_waits
        WHERE state = 'waiting' AND deadline > (SELECT now FROM clock)) AS next_due,
       (SELECT now FROM clock) AS db_now;

-- name: gauge_waiting
-- Per queue, the jobs waiting for a signal or a time (from the waits: jobs has no index on its
-- waiting rows), for the gauges.
SELECT queue, count(*) AS waiting
FROM __schema__.job_waits
WHERE state = 'waiting'
GROUP BY queue;
