-- What tenure.testing runs beside the worker's own statements: the queues a drain goes through,
-- and the test schema's lifecycle (emptied before each test, dropped after the session).

-- name: testing_due_queues
-- The queues with a due job of %(tasks)s (the app's), on %(queue)s alone when given: each is
-- then claimed until empty, so a drain lists queues once per round rather than jobs per run.
SELECT DISTINCT queue
FROM __schema__.jobs
WHERE state = 'pending'
  AND available_at <= now()
  AND task = ANY(%(tasks)s::text[])
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY queue;

-- name: testing_schema_empty
-- Deletes every row of the test schema but its migration record, so each test starts from none
-- of the last one's jobs, workflows, pauses, limits or schedules. DELETE rather than TRUNCATE: on
-- the few rows a test leaves it is ten times faster (no new files), and every foreign key between
-- these tables cascades. The tables are read from the catalog, so one a migration adds is emptied
-- too.
DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT c.oid::regclass FROM pg_class c
        WHERE c.relnamespace = '__schema__'::regnamespace AND c.relkind = 'r' AND c.relname <> 'schema_migrations'
    LOOP
        EXECUTE format('DELETE FROM %s', t);
    END LOOP;
END $$;

-- name: testing_schema_drop
DROP SCHEMA IF EXISTS __schema__ CASCADE;
