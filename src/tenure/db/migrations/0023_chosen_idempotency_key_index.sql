-- tenure: no-transaction
-- 0023: the unique index on idempotency keys holds the keys callers chose, not the version 8
-- keys Tenure generates (0022). Every transition of a job writes a new row version, and each
-- index that admits it gets an entry: the index on every key cost each job three entries, at its
-- enqueue, its claim and its completion, each with a uniqueness check, for keys that are random
-- and never met again. Built CONCURRENTLY beside the index it replaces, which goes last, so a
-- chosen key is checked at every moment of the upgrade. An interrupted build leaves an INVALID
-- index behind, which the first DROP removes before the next try.
DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_chosen_idempotency_key_idx;
CREATE UNIQUE INDEX CONCURRENTLY jobs_chosen_idempotency_key_idx ON __schema__.jobs (idempotency_key)
    WHERE substr(idempotency_key::text, 15, 1) <> '8';
DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_idempotency_key_idx;
