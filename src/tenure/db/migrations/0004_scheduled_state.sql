-- 0004: the `scheduled` state, for work whose run time is still in the future.
-- Alone in its migration on purpose: PostgreSQL refuses to use an enum value in the transaction
-- that added it, and 0005 uses it (the runner commits each migration on its own).

ALTER TYPE __schema__.job_state ADD VALUE IF NOT EXISTS 'scheduled' BEFORE 'pending';
