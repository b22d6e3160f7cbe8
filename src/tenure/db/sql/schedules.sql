-- Periodic jobs (docs/schedules.md). Schedulers (one in every worker whose app declares
-- schedules) register their declarations, read each schedule's state with the database's now,
-- compute the due slots in Python (cron needs a real calendar library) and fire them with
-- schedule_fire, whose guards make each slot fire once however many schedulers race.
-- Every query that depends on time takes %(now)s: NULL means the database clock.

-- name: schedule_register
-- Upserts the schedules one app declares, in name order (one lock order for every writer).
-- A new schedule starts at now: slots before its first registration never fire. A known one takes
-- the declared definition (the last worker to register it decides, as in a rolling deploy) and
-- keeps its last slot, pause and history; updated_at moves only when the definition changed.
-- declared_at says a live worker still declares it.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), input AS (
    SELECT *
    FROM unnest(
        %(names)s::text[], %(tasks)s::text[], %(queues)s::text[], %(crons)s::text[],
        %(timezones)s::text[], %(payloads)s::jsonb[], %(priorities)s::smallint[],
        %(max_attempts)s::integer[], %(missed)s::text[]
    ) AS u(name, task, queue, cron, timezone, payload, priority, max_attempts, missed)
)
INSERT INTO __schema__.schedules AS s (name, task, queue, cron, timezone, payload, priority, max_attempts,
                                      missed, last_slot, created_at, updated_at, declared_at)
SELECT i.name, i.task, i.queue, i.cron, i.timezone, i.payload, i.priority, i.max_attempts, i.missed,
       clock.now, clock.now, clock.now, clock.now
FROM input i CROSS JOIN clock
ORDER BY i.name
ON CONFLICT (name) DO UPDATE
SET task = excluded.task,
    queue = excluded.queue,
    cron = excluded.cron,
    timezone = excluded.timezone,
    payload = excluded.payload,
    priority = excluded.priority,
    max_attempts = excluded.max_attempts,
    missed = excluded.missed,
    updated_at = CASE
        WHEN (s.task, s.queue, s.cron, s.timezone, s.payload, s.priority, s.max_attempts, s.missed)
             IS DISTINCT FROM (excluded.task, excluded.queue, excluded.cron, excluded.timezone,
                               excluded.payload, excluded.priority, excluded.max_attempts, excluded.missed)
        THEN excluded.updated_at ELSE s.updated_at END,
    declared_at = greatest(s.declared_at, excluded.declared_at)
-- xmax is 0 only in a row version this statement inserted: the schedules new to the table.
RETURNING s.name, (s.xmax = 0) AS created;

-- name: schedule_state
-- What a scheduler needs to plan its schedules' next fire, and the database's now to plan it
-- against (never the worker's clock: workers' clocks may be skewed). One row with NULL columns
-- when none of the names is registered, so the clock always comes back.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
)
SELECT clock.now AS db_now, s.name, s.cron, s.timezone, s.missed, s.paused, s.last_slot, s.key_namespace
FROM clock
LEFT JOIN __schema__.schedules s ON s.name = ANY(%(names)s::text[])
ORDER BY s.name;

-- name: schedule_fire
-- Fires the slots a scheduler planned, exactly once whoever races it. Three guards:
--  1. the schedule's row is locked and must still be as the plan saw it (its last_slot, cron and
--     time zone, and not paused): a scheduler that fired it first moved last_slot on, so a
--     racing one finds no row and inserts nothing;
--  2. each job's idempotency key is uuid5 of the slot in the schedule's key namespace, so a slot
--     fired again would hit the unique index on chosen keys (ON CONFLICT DO NOTHING; its WHERE
--     is that index's predicate, and a schema before 0023 has a unique index on every key,
--     which the same clause also names);
--  3. schedule_fires' primary key is (schedule, slot).
-- Only slots later than last_slot and not later than now are inserted, as pending jobs due at
-- their slot (they age from it) with the schedule's task, queue, payload, priority and budget.
-- last_slot moves to %(advance_to)s, the latest due slot, fired or skipped by the missed policy,
-- so a skipped slot is never looked at again. The queue is notified.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), target AS (
    SELECT s.name, s.task, s.queue, s.payload, s.priority, s.max_attempts, s.last_slot
    FROM __schema__.schedules s
    WHERE s.name = %(name)s
      AND s.last_slot = %(seen_last_slot)s::timestamptz
      AND s.cron = %(cron)s
      AND s.timezone = %(timezone)s
      AND NOT s.paused
    FOR UPDATE
), due AS (
    SELECT u.slot, u.idempotency_key
    FROM unnest(%(slots)s::timestamptz[], %(keys)s::uuid[]) AS u(slot, idempotency_key)
    CROSS JOIN target t CROSS JOIN clock
    WHERE u.slot > t.last_slot
      AND u.slot <= clock.now
), inserted AS (
    INSERT INTO __schema__.jobs (queue, task, payload, priority, available_at, state, max_attempts,
                                 created_at, idempotency_key)
    SELECT t.queue, t.task, t.payload, t.priority, d.slot, 'pending'::__schema__.job_state, t.max_attempts,
           clock.now, d.idempotency_key
    FROM due d CROSS JOIN target t CROSS JOIN clock
    ORDER BY d.slot
    ON CONFLICT (idempotency_key) WHERE substr(idempotency_key::text, 15, 1) <> '8' DO NOTHING
    RETURNING id, idempotency_key
), fired AS (
    INSERT INTO __schema__.schedule_fires (schedule, slot, job_id, worker, fired_at)
    SELECT t.name, d.slot, i.id, %(worker)s, clock.now
    FROM inserted i JOIN due d USING (idempotency_key) CROSS JOIN target t CROSS JOIN clock
    ON CONFLICT (schedule, slot) DO NOTHING
    RETURNING slot, job_id
), advanced AS (
    UPDATE __schema__.schedules s
    SET last_slot = greatest(s.last_slot, least(%(advance_to)s::timestamptz, clock.now)),
        last_fired_slot = coalesce((SELECT max(f.slot) FROM fired f), s.last_fired_slot)
    FROM target t CROSS JOIN clock
    WHERE s.name = t.name
    RETURNING s.last_slot
), notified AS (
    SELECT count(pg_notify(%(channel)s, t.queue)) AS n
    FROM target t
    WHERE EXISTS (SELECT 1 FROM inserted)
)
SELECT (SELECT count(*) FROM advanced) = 1 AS won,
       (SELECT last_slot FROM advanced) AS last_slot,
       coalesce((SELECT array_agg(f.slot ORDER BY f.slot) FROM fired f), '{}') AS slots,
       coalesce((SELECT array_agg(f.job_id ORDER BY f.slot) FROM fired f), '{}') AS job_ids,
       (SELECT n FROM notified) AS queues_notified,
       (SELECT now FROM clock) AS db_now;

-- name: schedule_list
-- Every schedule ever registered, with how long ago a worker last declared it.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
)
SELECT s.name, s.task, s.queue, s.cron, s.timezone, s.payload, s.priority, s.max_attempts, s.missed,
       s.paused, s.paused_at, s.paused_by, s.pause_reason, s.resumed_at, s.resumed_by, s.resume_reason,
       s.last_slot, s.last_fired_slot, s.created_at, s.updated_at, s.declared_at,
       extract(epoch FROM clock.now - s.declared_at)::float8 AS undeclared_seconds,
       clock.now AS db_now
FROM __schema__.schedules s CROSS JOIN clock
ORDER BY s.name;

-- name: schedule_fires_recent
-- The latest fired slots of one schedule, newest first, with their jobs' states (NULL once
-- retention deleted the job).
SELECT f.slot, f.job_id, f.worker, f.fired_at, j.state::text AS job_state
FROM __schema__.schedule_fires f
LEFT JOIN __schema__.jobs j ON j.id = f.job_id
WHERE f.schedule = %(name)s
ORDER BY f.slot DESC
LIMIT %(limit)s;

-- name: schedule_pause
-- Pauses a schedule: no scheduler fires it until it is resumed. Outcome 'paused', or 'already'
-- with the pause that was there (nothing changed); no row: there is no such schedule.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), target AS (
    SELECT name, paused, paused_at, paused_by, pause_reason
    FROM __schema__.schedules WHERE name = %(name)s FOR UPDATE
), moved AS (
    UPDATE __schema__.schedules s
    SET paused = true, paused_at = clock.now, paused_by = %(actor)s, pause_reason = %(reason)s
    FROM target t CROSS JOIN clock
    WHERE s.name = t.name AND NOT t.paused
    RETURNING s.paused_at, s.paused_by, s.pause_reason
)
SELECT 'paused' AS outcome, m.paused_at, m.paused_by, m.pause_reason FROM moved m
UNION ALL
SELECT 'already', t.paused_at, t.paused_by, t.pause_reason FROM target t WHERE t.paused;

-- name: schedule_resume
-- Ends a schedule's pause. Slots that fell due while it was paused are skipped (last_slot moves
-- to now): a pause means "fire nothing", and a resume does not fire what the operator held back.
-- Who resumed it, when and why replace the pause's record on the row, as the pause's did.
-- Outcome 'resumed', 'not_paused' (nothing changed) or no row (no such schedule).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now
), target AS (
    SELECT name, paused FROM __schema__.schedules WHERE name = %(name)s FOR UPDATE
), moved AS (
    UPDATE __schema__.schedules s
    SET paused = false, paused_at = NULL, paused_by = NULL, pause_reason = NULL,
        resumed_at = clock.now, resumed_by = %(actor)s, resume_reason = %(reason)s,
        last_slot = greatest(s.last_slot, clock.now)
    FROM target t CROSS JOIN clock
    WHERE s.name = t.name AND t.paused
    RETURNING s.name, s.last_slot
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM moved) THEN 'resumed' ELSE 'not_paused' END AS outcome,
       (SELECT last_slot FROM moved) AS skipped_until
FROM target t;

-- name: schedule_fires_prune
-- Fired-slot history older than the retention, oldest first, in a bounded batch. The schedule row
-- keeps its last fired slot, so `tenure schedules list` still shows it.
WITH doomed AS (
    SELECT schedule, slot
    FROM __schema__.schedule_fires
    WHERE fired_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(seconds)s)
    ORDER BY fired_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM __schema__.schedule_fires f USING doomed d
WHERE f.schedule = d.schedule AND f.slot = d.slot
RETURNING f.slot;
