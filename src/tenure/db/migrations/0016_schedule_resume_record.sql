-- 0016: who resumed a schedule, when and why, kept on its row as its pause is (docs/schedules.md).
-- A resume clears the pause's columns, so until now it left no trace of who ended the pause.
-- The last resume stays until the next one replaces it. Like the pause columns, these are the
-- admin role's: the worker role's column grants on schedules do not name them. New nullable
-- columns with no default cost no rewrite; the table holds one row per schedule.

ALTER TABLE __schema__.schedules
    ADD COLUMN resumed_at timestamptz,
    ADD COLUMN resumed_by text,
    ADD COLUMN resume_reason text;
ALTER TABLE __schema__.schedules ADD CONSTRAINT schedules_resume_recorded CHECK (
    (resumed_at IS NULL) = (resumed_by IS NULL) AND (resume_reason IS NULL OR resumed_at IS NOT NULL)
);
ALTER TABLE __schema__.schedules ADD CONSTRAINT schedules_resume_bounded CHECK (
    char_length(resumed_by) BETWEEN 1 AND 200 AND char_length(resume_reason) BETWEEN 1 AND 2000
);
