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

-- Promotion takes due scheduled jobs earliest first; `queue` rides along so the gauges can count
-- scheduled jobs per queue from the index alone.
CREATE INDEX jobs_scheduled_idx ON __schema__.jobs (available_at) INCLUDE (queue)
    WHERE state = 'scheduled';

-- The claim's oldest-first share: a queue's due jobs by age, whatever their priority.
CREATE INDEX jobs_claimable_by_age_idx ON __schema__.jobs (queue, available_at, id)
    WHERE state = 'pending';

-- A scheduled job of a key (a delayed head, or one waiting out its retry's backoff) still blocks
-- the jobs behind it.
DROP INDEX __schema__.jobs_ordering_idx;
CREATE INDEX jobs_ordering_idx ON __schema__.jobs (ordering_key, id)
    WHERE ordering_key IS NOT NULL AND state IN ('scheduled', 'pending', 'running', 'dead');

-- Nothing raises a stored priority any more: give aged jobs back the priority they were enqueued
-- with, then drop the boost.
UPDATE __schema__.jobs SET priority = priority - priority_boost WHERE priority_boost > 0;
ALTER TABLE __schema__.jobs DROP COLUMN priority_boost;
