-- tenure: no-transaction
-- 0021: what it takes to see jobs no live worker can run (docs/operations.md, "Jobs no worker
-- runs"): each worker's registry row lists the tasks it registered (NULL for a worker of an
-- earlier version, which counts as running every task of its queues), and an index of the
-- waiting jobs by task and queue, which the gauge walks one (task, queue) pair at a time instead
-- of reading the whole backlog.
--
-- The index is built CONCURRENTLY, so that an upgrade never holds off enqueues while it builds on
-- a large table, under a temporary name first: a rerun after an interrupted build drops the
-- INVALID index it left behind and starts again.

ALTER TABLE __schema__.workers ADD COLUMN IF NOT EXISTS tasks text[];

DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_waiting_task_idx_new;
CREATE INDEX CONCURRENTLY jobs_waiting_task_idx_new ON __schema__.jobs (task, queue)
    WHERE state IN ('scheduled', 'pending');
DROP INDEX CONCURRENTLY IF EXISTS __schema__.jobs_waiting_task_idx;
ALTER INDEX __schema__.jobs_waiting_task_idx_new RENAME TO jobs_waiting_task_idx;
