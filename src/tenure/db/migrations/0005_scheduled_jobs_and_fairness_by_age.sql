-- 0005: jobs waiting for a future run time leave the claim index (state `scheduled`, promoted to
-- `pending` when due), and the claim's oldest-first share replaces priority aging, which
-- rewrote every waiting job over and over.
-- In steps (migrate.py, STEP), so that no step scans or rewrites jobs under a lock that stops
-- writes: the constraint is added NOT VALID and validated last; the two rewrites go in batches
-- of ids, each committed on its own. Every step can run again after a failure part-way.

-- A scheduled job waits like a pending one: it has attempts left. (jobs_running_has_lease and
-- jobs_finished_iff_terminal already keep its lease columns and finished_at empty.)
ALTER TABLE __schema__.jobs DROP CONSTRAINT IF EXISTS jobs_pending_has_budget;
ALTER TABLE __schema__.jobs DROP CONSTRAINT IF EXISTS jobs_waiting_has_budget;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_waiting_has_budget
    CHECK (state NOT IN ('scheduled', 'pending') OR attempt_count < max_attempts) NOT VALID;

-- tenure: step
-- Jobs already waiting for a later run time move out of the claim index, and aged jobs get back
-- the priority they were enqueued with (nothing raises a stored priority any more).
DO $$
DECLARE
    lo bigint;
    top bigint;
BEGIN
    SELECT min(id), max(id) INTO lo, top FROM __schema__.jobs;
    WHILE lo <= top LOOP
        UPDATE __schema__.jobs SET state = 'scheduled'
        WHERE id >= lo AND id < lo + 10000 AND state = 'pending' AND available_at > now();
        UPDATE __schema__.jobs SET priority = priority - priority_boost, priority_boost = 0
        WHERE id >= lo AND id < lo + 10000 AND priority_boost > 0;
        COMMIT;
        lo := lo + 10000;
    END LOOP;
END
$$;

-- tenure: step
ALTER TABLE __schema__.jobs VALIDATE CONSTRAINT jobs_waiting_has_budget;

-- tenure: step
-- The indexes the promotion, the oldest-first share and the head rule (now counting scheduled
-- jobs) read are built by migration 0008, CONCURRENTLY. A boost written by an older worker
-- between the batches above and this step is dropped with the column: it was a transient aging.
ALTER TABLE __schema__.jobs DROP COLUMN IF EXISTS priority_boost;
