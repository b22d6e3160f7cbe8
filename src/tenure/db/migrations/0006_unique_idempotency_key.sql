-- tenure: no-transaction
-- 0006: one job per idempotency key. Producers send the key of each job they enqueue, so
-- the database, not the producer's good faith, must keep two jobs from sharing one: a shared key
-- lets a destination that deduplicates by key swallow the second job's call.
--
-- Built CONCURRENTLY so an upgrade does not block enqueues and claims while the index builds on
-- a large table. An interrupted build leaves an INVALID index behind, which the DROP removes
-- before the next try. If the build fails because keys are already duplicated, see
-- docs/operations.md ("Upgrading") for how to find and resolve them.
DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_idempotency_key_idx;
CREATE UNIQUE INDEX CONCURRENTLY jobs_idempotency_key_idx ON __schema__.jobs (idempotency_key);
