-- 0009: job control. Results stored with a succeeded job, and a flag a caller that
-- will wait for the result sets at enqueue (only those completions notify); a snooze count;
-- durable queue pauses with their own history; revoke, snooze and retry_now in the job history.
-- Only a role that may write queue pauses (the admin role) may cancel a job.

ALTER TABLE __schema__.jobs ADD COLUMN result jsonb;
ALTER TABLE __schema__.jobs ADD COLUMN result_wanted boolean NOT NULL DEFAULT false;
ALTER TABLE __schema__.jobs ADD COLUMN snoozes integer NOT NULL DEFAULT 0;
-- NOT VALID: every existing row has a NULL result and no snoozes, and validating would scan the
-- whole table under its exclusive lock. New and updated rows are checked.
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_result_when_succeeded
    CHECK (result IS NULL OR state = 'succeeded') NOT VALID;
ALTER TABLE __schema__.jobs ADD CONSTRAINT jobs_snoozes_counted CHECK (snoozes >= 0) NOT VALID;

CREATE TABLE __schema__.queue_pauses (
    queue     text PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    until     timestamptz,
    actor     text NOT NULL,
    reason    text NOT NULL,
    CONSTRAINT queue_pauses_reason_bounded CHECK (char_length(reason) BETWEEN 1 AND 2000),
    CONSTRAINT queue_pauses_actor_bounded CHECK (char_length(actor) BETWEEN 1 AND 200),
    CONSTRAINT queue_pauses_until_later CHECK (until IS NULL OR until > paused_at)
);

CREATE TABLE __schema__.queue_events (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue  text NOT NULL,
    event  text NOT NULL,
    until  timestamptz,
    actor  text NOT NULL,
    reason text,
    at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_events_event_known CHECK (event IN ('pause', 'resume')),
    CONSTRAINT queue_events_reason_bounded CHECK (char_length(reason) <= 2000)
);
CREATE INDEX queue_events_queue_idx ON __schema__.queue_events (queue, id);

ALTER TABLE __schema__.job_events DROP CONSTRAINT job_events_event_known;
ALTER TABLE __schema__.job_events ADD CONSTRAINT job_events_event_known CHECK (event IN (
    'retry', 'lease_expired', 'fencing_lost', 'dead', 'released', 'reprocess', 'cancel', 'lease_lost',
    'revoke', 'snooze', 'retry_now'
)) NOT VALID;

-- Cancelling is an operator's act. The worker role may write a job's state (it must, to claim
-- and complete), so a column privilege cannot keep it from writing 'cancelled'; this trigger
-- can: only a role that may also pause queues may cancel. It fires only on that one transition.
CREATE FUNCTION __schema__.jobs_cancel_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT has_table_privilege(format('%I.queue_pauses', TG_TABLE_SCHEMA), 'INSERT') THEN
        RAISE EXCEPTION 'role % may not cancel jobs', current_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'cancel and revoke as the admin role (see tenure roles)';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER jobs_cancel_guard BEFORE UPDATE OF state ON __schema__.jobs
    FOR EACH ROW WHEN (NEW.state = 'cancelled' AND OLD.state IS DISTINCT FROM 'cancelled')
    EXECUTE FUNCTION __schema__.jobs_cancel_guard();
