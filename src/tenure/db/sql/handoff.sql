-- Hand-off: a lone job given to an idle worker inside its enqueue's own statement, with no claim
-- (docs/hand-off.md). An idle worker offers one free slot (offer_make); a lone job's insert takes
-- the offer and goes in running under that worker's lease, token 1, and the commit notifies the
-- worker's own channel with the job (job_hand_off). Every write after it is fenced as after a
-- claim; an offer taken by a worker that died is a claimed job whose lease runs out.

-- name: offer_make
-- The worker's offer of one slot, standing for %(stands_for)s seconds of database time (from
-- %(now)s, which tests give; else the statement's time): made when
-- its claim found its queues empty, and made again once the job that took it was heard. Its
-- tasks are those it runs on its default lease and runtime (a task with a policy of its own is
-- claimed as before). Offers that lapsed an hour ago (of workers killed, whose row stays) are
-- deleted on the way, so that the enqueue's look-up reads only live ones.
WITH lapsed AS (
    DELETE FROM __schema__.worker_offers
    WHERE until < coalesce(%(now)s::timestamptz, statement_timestamp()) - interval '1 hour'
      AND worker <> %(worker)s
)
INSERT INTO __schema__.worker_offers AS o
    (worker, channel, queues, tasks, lease_seconds, runtime_seconds, slots, until)
VALUES (%(worker)s, %(channel)s, %(queues)s::text[], %(tasks)s::text[], %(lease_seconds)s::float8,
        %(runtime_seconds)s::float8, 1,
        coalesce(%(now)s::timestamptz, statement_timestamp()) + make_interval(secs => %(stands_for)s::float8))
ON CONFLICT (worker) DO UPDATE
SET channel = EXCLUDED.channel, queues = EXCLUDED.queues, tasks = EXCLUDED.tasks,
    lease_seconds = EXCLUDED.lease_seconds, runtime_seconds = EXCLUDED.runtime_seconds,
    slots = 1, until = EXCLUDED.until;

-- name: offer_renew
-- The standing offer made to stand %(stands_for)s seconds more, its slot left as it is: the
-- slots it returns are 0 when a job took the offer and its notification is still on its way.
-- No row: the offer is gone (withdrawn, or the worker's row deleted by an operator).
UPDATE __schema__.worker_offers
SET until = coalesce(%(now)s::timestamptz, statement_timestamp()) + make_interval(secs => %(stands_for)s::float8)
WHERE worker = %(worker)s
RETURNING slots;

-- name: offer_withdraw
-- The worker takes its offer back (it stops, or wants the slot for a claim). Waits for an
-- enqueue that holds the offer's row to end, so that what it returns is final: 0 slots when a
-- job took the offer (the worker finds it with jobs_handed_unheard if it was not heard).
DELETE FROM __schema__.worker_offers
WHERE worker = %(worker)s
RETURNING slots;

-- name: jobs_handed_unheard
-- Jobs handed to this worker whose notification it did not hear (its listener was reconnecting,
-- or it stopped as the job came): running under its lease at their first token, other than the
-- ones it runs (%(known)s). Returned as a claim returns them. Only a handed attempt began at the
-- job's creation (job_hand_off sets both from one clock; a claim runs in a later transaction), so
-- a job this worker has just claimed, and not yet started, is never taken for one.
WITH clock AS (
    SELECT statement_timestamp() AS now
)
SELECT __part_claimed_columns__
FROM __schema__.jobs j CROSS JOIN clock
WHERE j.state = 'running'
  AND j.lease_owner = %(owner)s
  AND j.lease_token = 1
  AND j.attempted_at = j.created_at
  AND j.lease_expires_at > clock.now
  AND j.id <> ALL(%(known)s::bigint[])
ORDER BY j.id;

-- name: job_hand_off
-- job_insert_one for a lone job due now, in a transaction of its own, whose queue was at rest
-- (tenure.db.wakeups): the job takes a standing offer of a worker that runs its queue and task,
-- when there is one and nothing else waits there (the queue neither paused nor limited, no job
-- of it due and pending: a handed job never passes one that waits), and goes in running under
-- that worker's lease, attempt 1, token 1; the commit notifies the worker's channel with the job
-- as a claim returns it (claimed_columns, as a JSON object). The lease is a claim's (claim_clock:
-- the runtime's end, and the lease's, never past it), of the offer's lengths. Without an offer it
-- is job_insert_one's
-- row, and notifies its queue. An offer another enqueue holds is passed over (SKIP LOCKED).
-- Returns job_insert_one's columns, and whether the job was handed (the client's wake-up limiter
-- counts only a queue's notification as one).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), offer AS (
    UPDATE __schema__.worker_offers o
    SET slots = o.slots - 1
    FROM clock
    WHERE o.worker = (
        SELECT f.worker FROM __schema__.worker_offers f
        WHERE f.slots > 0
          AND f.until > clock.now
          -- The job's notification must fit pg_notify's 8000 bytes with its other columns.
          AND octet_length(%(payload)s::text)
              + coalesce(octet_length(%(trace_context)s::jsonb::text), 0) <= %(notify_room)s::integer
          AND %(queue)s::text = ANY(f.queues)
          AND %(task)s::text = ANY(f.tasks)
          AND NOT EXISTS (
              SELECT 1 FROM __schema__.queue_pauses p
              WHERE p.queue = %(queue)s::text AND (p.until IS NULL OR p.until > clock.now))
          AND NOT EXISTS (SELECT 1 FROM __schema__.queue_limits l WHERE l.queue = %(queue)s::text)
          AND NOT EXISTS (
              SELECT 1 FROM __schema__.jobs c
              WHERE c.state = 'pending' AND c.queue = %(queue)s::text AND c.available_at <= clock.now)
        LIMIT 1
        FOR UPDATE OF f SKIP LOCKED)
    RETURNING o.worker, o.channel,
              clock.now + make_interval(secs => o.runtime_seconds) AS deadline,
              clock.now + make_interval(secs => least(o.lease_seconds, o.runtime_seconds)) AS expiry
)
INSERT INTO __schema__.jobs AS j (queue, task, payload, priority, available_at, state, max_attempts,
                                  created_at, idempotency_key, result_wanted, trace_context,
                                  attempt_count, lease_token, lease_owner, attempted_at,
                                  lease_deadline, lease_expires_at)
SELECT %(queue)s::text, %(task)s::text, %(payload)s::jsonb, %(priority)s::smallint, clock.now,
       CASE WHEN offer.worker IS NULL THEN 'pending' ELSE 'running' END::__schema__.job_state,
       %(max_attempts)s::integer, clock.now, %(idempotency_key)s::uuid, %(result_wanted)s::boolean,
       %(trace_context)s::jsonb,
       CASE WHEN offer.worker IS NULL THEN 0 ELSE 1 END, CASE WHEN offer.worker IS NULL THEN 0 ELSE 1 END,
       offer.worker, CASE WHEN offer.worker IS NOT NULL THEN clock.now END, offer.deadline, offer.expiry
FROM clock LEFT JOIN offer ON true
RETURNING j.id, j.available_at, false AS scheduled,
          CASE WHEN j.lease_owner IS NULL
               THEN pg_notify(%(channel)s, %(queue)s::text)
               ELSE pg_notify((SELECT channel FROM offer),
                              (SELECT row_to_json(c)::text FROM (SELECT __part_claimed_columns__ FROM clock) c))
          END IS NULL AS notified,
          j.lease_owner IS NOT NULL AS handed;
