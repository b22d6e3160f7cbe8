-- 0030: an idle worker's offer to take a job in its enqueue's own statement (docs/hand-off.md).
-- A worker whose claim found its queues empty writes one row here: the queues and tasks it would
-- claim, its default lease, one free slot, and how long the offer stands. A lone job enqueued
-- due now into such a queue, in a transaction of its own, takes the offer inside its INSERT (the
-- row locked, SKIP LOCKED) and goes in already running under that worker's lease, token 1; the
-- commit's notification on the worker's own channel carries the job. The row is updated in
-- place (no indexed column changes), so the table stays a page or two with or without vacuum.
CREATE TABLE __schema__.worker_offers (
    worker          text PRIMARY KEY,
    channel         text NOT NULL,
    queues          text[] NOT NULL,
    tasks           text[] NOT NULL,
    lease_seconds   float8 NOT NULL,
    runtime_seconds float8 NOT NULL,
    slots           integer NOT NULL,
    until           timestamptz NOT NULL
) WITH (fillfactor = 50);
