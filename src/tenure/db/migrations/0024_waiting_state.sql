-- 0024: the `waiting` state, for a job whose handler waits for a signal or a time (docs/waits.md).
-- Alone in its migration on purpose: PostgreSQL refuses to use an enum value in the transaction
-- that added it, and 0025 uses it (the runner commits each migration on its own).

ALTER TYPE __schema__.job_state ADD VALUE IF NOT EXISTS 'waiting' AFTER 'running';
