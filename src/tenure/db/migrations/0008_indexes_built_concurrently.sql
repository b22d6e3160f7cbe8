-- tenure: no-transaction
-- 0008: the indexes that migrations 0002, 0003 and 0005 add to tables that already hold jobs,
-- built CONCURRENTLY so that an upgrade never blocks enqueues, claims and completions while an
-- index builds on a large table (a plain CREATE INDEX holds off every write until it is done).
--
-- Each is built under a temporary name, then put in place of the old one (a database that
-- applied the earlier versions of 0002/0003/0005 has them, some with an older definition), so
-- a rerun after an interrupted build starts that index again: the DROP removes the INVALID
-- index an interrupted CONCURRENTLY build leaves behind.

DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_ordering_idx_new;
CREATE INDEX CONCURRENTLY jobs_ordering_idx_new ON __schema__.jobs (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running', 'dead');
DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_ordering_idx;
ALTER INDEX __schema__.jobs_ordering_idx_new RENAME TO jobs_ordering_idx;

DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_finished_idx_new;
CREATE INDEX CONCURRENTLY jobs_finished_idx_new ON __schema__.jobs (finished_at)
    WHERE state IN ('succeeded', 'cancelled');
DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_finished_idx;
ALTER INDEX __schema__.jobs_finished_idx_new RENAME TO jobs_finished_idx;

DROP INDEX CONCURRENTLY IF EXISTS __schema__.job_events_at_idx_new;
CREATE INDEX CONCURRENTLY job_events_at_idx_new ON __schema__.job_events (at);
DROP INDEX CONCURRENTLY IF EXISTS __schema__.job_events_at_idx;
ALTER INDEX __schema__.job_events_at_idx_new RENAME TO job_events_at_idx;

DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_scheduled_idx_new;
CREATE INDEX CONCURRENTLY jobs_scheduled_idx_new ON __schema__.jobs (available_at) INCLUDE (queue)
    WHERE state = 'scheduled';
DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_scheduled_idx;
ALTER INDEX __schema__.jobs_scheduled_idx_new RENAME TO jobs_scheduled_idx;

DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_claimable_by_age_idx_new;
CREATE INDEX CONCURRENTLY jobs_claimable_by_age_idx_new ON __schema__.jobs (queue, available_at, id)
    WHERE state = 'pending';
DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_claimable_by_age_idx;
ALTER INDEX __schema__.jobs_claimable_by_age_idx_new RENAME TO jobs_claimable_by_age_idx;
