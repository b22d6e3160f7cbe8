-- tenure: no-transaction
-- 0012: the unique index of unique jobs (migration 0011), built CONCURRENTLY so that an upgrade
-- never holds off enqueues and claims while it builds. An interrupted build leaves an INVALID
-- index behind, which the DROP removes before the next try.
DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_unique_key_idx;
CREATE UNIQUE INDEX CONCURRENTLY jobs_unique_key_idx ON __schema__.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state = ANY(unique_states);
