-- 0005: jobs waiting for a future run time leave the claim index (state `scheduled`, promoted to
-- `pending` when due), and the claim's oldest-first share replaces priority aging (O3), which
-- rewrote every waiting job over and over.

-- A scheduled job waits like a pending one: it has attempts left. (jobs_running_has_lease and
-- jobs_finished_iff_terminal already keep its lease columns and finished_at empty.)
ALTER TABLE __schema__.jobs DROP CONSTRAINT jobs_pending_has_budget;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_waiting_has_budget
    CHECK (state NOT IN ('scheduled', 'pending') OR attempt_count < max_attempts);

-- Jobs already waiting for a later run time move out of the claim index.
UPDATE __schema__.jobs SET state = 'scheduled' WHERE state = 'pending' AND available_at > now();

-- The indexes the promotion, the oldest-first share and the head rule (now counting scheduled
-- jobs) read are built by migration 0008, CONCURRENTLY, so that an upgrade does not block writes.

-- Nothing raises a stored priority any more: give aged jobs back the priority they were enqueued
-- with, then drop the boost.
UPDATE __schema__.jobs SET priority = priority - priority_boost WHERE priority_boost > 0;
ALTER TABLE __schema__.jobs DROP COLUMN priority_boost;
