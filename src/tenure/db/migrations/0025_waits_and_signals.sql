-- 0025: waits and signals (docs/waits.md). A handler may wait for a signal (a message sent to a
-- key) or for a time without holding a slot or a lease: its job leaves `running` for `waiting`,
-- with one job_waits row saying what for and until when, and comes back `pending` when a signal
-- is delivered to it, its deadline passes, or an operator ends the wait. Waiting jobs sit outside
-- every claim index, so a million of them cost a claim nothing.
--
-- A signal is a message to ONE waiter of its key. It is written by signal(), in the sender's own
-- transaction (a signal rolled back was never sent), and delivered at once to the key's oldest
-- waiter, if one waits; otherwise it is kept in the mailbox until a waiter comes or its keeping
-- time ends. A delivered signal belongs to the job it woke: every later attempt of that job gets
-- the same signal from its wait, and no other job ever does; the attempt that consumes it is the
-- one whose fenced completion commits.
--
-- No lock serialises a send against a wait. The two can race (each commits without seeing the
-- other); every such pair is matched by the recovery pass (signals_sweep), which looks once, after
-- their commit, at every signal and wait that was not delivered at once.

ALTER TABLE __schema__.job_events DROP CONSTRAINT job_events_event_known;
ALTER TABLE __schema__.job_events ADD CONSTRAINT job_events_event_known CHECK (event IN (
    'retry', 'lease_expired', 'fencing_lost', 'dead', 'released', 'reprocess', 'cancel', 'lease_lost',
    'revoke', 'snooze', 'retry_now', 'wait', 'signalled', 'wait_timeout', 'wait_ended'
)) NOT VALID;

CREATE TABLE __schema__.signals (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key             text NOT NULL,
    payload         jsonb NOT NULL DEFAULT 'null',
    -- A second signal to the same key with the same idempotency key is the first one, while the
    -- first is kept.
    idempotency_key text,
    sent_at         timestamptz NOT NULL DEFAULT statement_timestamp(),
    -- Undelivered past this, it is dropped (and counted in signal_totals).
    expires_at      timestamptz NOT NULL,
    sent_by         text NOT NULL DEFAULT session_user,
    -- The job it was delivered to, and when; NULL while it is in the mailbox.
    job_id          bigint REFERENCES __schema__.jobs (id) ON DELETE CASCADE,
    delivered_at    timestamptz,
    -- Looked at by the recovery pass (or delivered at once): no race can have left it unmatched.
    swept           boolean NOT NULL DEFAULT false,
    CONSTRAINT signals_key_length CHECK (char_length(key) BETWEEN 1 AND 400),
    CONSTRAINT signals_idempotency_key_length CHECK (char_length(idempotency_key) BETWEEN 1 AND 200),
    CONSTRAINT signals_payload_size CHECK (octet_length(payload::text) <= 65536),
    CONSTRAINT signals_delivered CHECK ((job_id IS NULL) = (delivered_at IS NULL))
);
CREATE UNIQUE INDEX signals_idempotency_key_idx ON __schema__.signals (key, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- The mailbox: undelivered signals of a key, oldest first.
CREATE INDEX signals_mailbox_idx ON __schema__.signals (key, id) WHERE job_id IS NULL;
CREATE INDEX signals_expiry_idx ON __schema__.signals (expires_at) WHERE job_id IS NULL;
CREATE INDEX signals_unswept_idx ON __schema__.signals (id) WHERE NOT swept;
-- For a job's own signals, and for the cascade when a finished job is pruned.
CREATE INDEX signals_job_idx ON __schema__.signals (job_id) WHERE job_id IS NOT NULL;

-- One row per wait a job began, by the name the handler gave it (or its place in the handler):
-- a resumed attempt finds how its earlier waits ended here, so work before a wait is not waited
-- for again.
CREATE TABLE __schema__.job_waits (
    job_id      bigint NOT NULL REFERENCES __schema__.jobs (id) ON DELETE CASCADE,
    name        text NOT NULL,
    -- The job's queue (which never changes): the gauges count waiting jobs from here.
    queue       text NOT NULL,
    -- The signal key waited for; NULL for a sleep, which only its deadline ends.
    key         text,
    state       text NOT NULL DEFAULT 'waiting',
    since       timestamptz NOT NULL,
    deadline    timestamptz,
    -- The attempt (fencing token) that began the wait.
    token       bigint NOT NULL,
    signal_id   bigint,
    resolved_at timestamptz,
    -- Who ended it, when an operator did.
    ended_by    text,
    swept       boolean NOT NULL DEFAULT false,
    PRIMARY KEY (job_id, name),
    CONSTRAINT job_waits_state_known CHECK (state IN ('waiting', 'signalled', 'timed_out', 'ended', 'cancelled')),
    CONSTRAINT job_waits_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT job_waits_key_length CHECK (char_length(key) BETWEEN 1 AND 400),
    CONSTRAINT job_waits_waits_for_something CHECK (key IS NOT NULL OR deadline IS NOT NULL),
    CONSTRAINT job_waits_resolved CHECK ((state = 'waiting') = (resolved_at IS NULL)),
    CONSTRAINT job_waits_signalled CHECK ((state = 'signalled') = (signal_id IS NOT NULL))
);
-- A job waits for one thing at a time.
CREATE UNIQUE INDEX job_waits_one_at_a_time_idx ON __schema__.job_waits (job_id) WHERE state = 'waiting';
CREATE INDEX job_waits_key_idx ON __schema__.job_waits (key, since) WHERE state = 'waiting' AND key IS NOT NULL;
CREATE INDEX job_waits_deadline_idx ON __schema__.job_waits (deadline)
    WHERE state = 'waiting' AND deadline IS NOT NULL;
CREATE INDEX job_waits_unswept_idx ON __schema__.job_waits (job_id) WHERE NOT swept;
CREATE INDEX job_waits_queue_idx ON __schema__.job_waits (queue) WHERE state = 'waiting';

-- A cancel ends a waiting job's wait with it (no signal is delivered to it, no deadline wakes it):
-- the cancel guard, which fires on that one transition only, does it, so no statement that
-- cancels needs to know about waits.
CREATE OR REPLACE FUNCTION __schema__.jobs_cancel_guard() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT pg_catalog.has_table_privilege(pg_catalog.format('%I.queue_pauses', TG_TABLE_SCHEMA), 'INSERT') THEN
        RAISE EXCEPTION 'role % may not cancel jobs', current_user
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'cancel and revoke as the admin role (see tenure roles)';
    END IF;
    IF OLD.state = 'waiting' THEN
        UPDATE __schema__.job_waits
        SET state = 'cancelled', resolved_at = pg_catalog.statement_timestamp(), swept = true
        WHERE job_id = OLD.id AND state = 'waiting';
    END IF;
    RETURN NEW;
END
$$;

-- Signals dropped undelivered when their keeping time ended, since this schema was made.
CREATE TABLE __schema__.signal_totals (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    expired bigint NOT NULL DEFAULT 0
);
INSERT INTO __schema__.signal_totals DEFAULT VALUES;

-- Delivers signal `sid`, if it is still in the mailbox and unexpired at `at`, to the oldest job
-- waiting for its key that no one else has locked: the wait is marked signalled, the job goes
-- pending, its history names the sender (and `note`, the sender's reason, when given) and its
-- queue is told. Returns the job woken, or NULL. Not callable by other roles: signal() and
-- signals_sweep() call it.
CREATE FUNCTION __schema__.signal_deliver(sid bigint, at timestamptz, note text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s __schema__.signals;
    candidate record;
    waiter record;
    got boolean := false;
BEGIN
    SELECT * INTO s FROM __schema__.signals
    WHERE id = sid AND job_id IS NULL AND expires_at > at
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The key's waits, longest first, each locked in turn with its job (SKIP LOCKED: one locked
    -- elsewhere is passed over, not waited for), through the key's index alone: a join in one
    -- statement let a plan read every pending job.
    FOR candidate IN
        SELECT w.job_id, w.name FROM __schema__.job_waits w
        WHERE w.key = s.key AND w.state = 'waiting'
        ORDER BY w.since, w.job_id
    LOOP
        SELECT w.job_id, w.name, w.token, j.queue INTO waiter
        FROM __schema__.job_waits w, LATERAL (
            SELECT j.queue FROM __schema__.jobs j
            WHERE j.id = w.job_id AND j.state = 'waiting'
            FOR UPDATE SKIP LOCKED) j
        WHERE w.job_id = candidate.job_id AND w.name = candidate.name AND w.state = 'waiting'
        FOR UPDATE OF w SKIP LOCKED;
        got := FOUND;
        EXIT WHEN got;
    END LOOP;
    IF NOT got THEN
        RETURN NULL;
    END IF;
    UPDATE __schema__.job_waits
    SET state = 'signalled', signal_id = s.id, resolved_at = at, swept = true
    WHERE job_id = waiter.job_id AND name = waiter.name;
    UPDATE __schema__.signals SET job_id = waiter.job_id, delivered_at = at, swept = true WHERE id = s.id;
    UPDATE __schema__.jobs SET state = 'pending', available_at = at WHERE id = waiter.job_id;
    INSERT INTO __schema__.job_events (job_id, event, from_state, to_state, token, worker, error, at)
    VALUES (waiter.job_id, 'signalled', 'waiting', 'pending', waiter.token, s.sent_by,
            left(format('signal %s to %s', s.id, s.key) || coalesce(': ' || note, ''), 2000), at);
    PERFORM pg_notify(left('tenure:' || (SELECT n.nspname FROM pg_class c JOIN pg_namespace n
                                          ON n.oid = c.relnamespace WHERE c.oid = '__schema__.jobs'::regclass), 63),
                      waiter.queue);
    RETURN waiter.job_id;
END
$$;
REVOKE ALL ON FUNCTION __schema__.signal_deliver(bigint, timestamptz, text) FROM PUBLIC;

-- Sends a signal: the one guarded way in for every role, from Python (app.signal), the CLI, psql
-- or any language, in the caller's transaction. Checks the bounds before writing anything. Returns
-- the signal's id and its outcome: 'delivered' (a waiting job was woken: job_id), 'kept' (no job
-- waits for the key yet: it is in the mailbox for `keep_seconds`) or 'duplicate' (a signal with
-- this idempotency key was sent to this key before and is still kept: nothing was written; its
-- id and, when delivered, its job). `sender` names who sent it (the database role when NULL, as
-- an operator's actor elsewhere: what the caller says); `note`, the sender's reason, goes into the
-- history of a job the signal wakes at once.
CREATE FUNCTION __schema__.signal(
    key text,
    payload jsonb DEFAULT 'null',
    idempotency_key text DEFAULT NULL,
    keep_seconds float8 DEFAULT 604800,
    sender text DEFAULT NULL,
    note text DEFAULT NULL
) RETURNS TABLE (signal_id bigint, outcome text, job_id bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    at timestamptz := statement_timestamp();
    sid bigint;
    woken bigint;
    size integer;
BEGIN
    IF key IS NULL OR char_length(key) NOT BETWEEN 1 AND 400 THEN
        RAISE EXCEPTION 'a signal key must be 1 to 400 characters, got %', coalesce(char_length(key)::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'name what is awaited, e.g. ''payment:order-7''; hash a longer key';
    END IF;
    IF idempotency_key IS NOT NULL AND char_length(idempotency_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a signal''s idempotency key must be 1 to 200 characters, got %', char_length(idempotency_key)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    size := octet_length(coalesce(payload, 'null'::jsonb)::text);
    IF size > 65536 THEN
        RAISE EXCEPTION 'a signal''s payload is % bytes of JSON, over the limit of 65536', size
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'store large data elsewhere and send a reference to it';
    END IF;
    IF keep_seconds IS NULL OR NOT keep_seconds BETWEEN 1 AND 7776000 THEN
        RAISE EXCEPTION 'a signal is kept 1 second to 90 days (7776000 seconds) for a waiter, got %', keep_seconds
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF idempotency_key IS NOT NULL THEN
        RETURN QUERY SELECT s.id, 'duplicate'::text, s.job_id FROM __schema__.signals s
                     WHERE s.key = signal.key AND s.idempotency_key = signal.idempotency_key;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    INSERT INTO __schema__.signals (key, payload, idempotency_key, sent_at, expires_at, sent_by)
    VALUES (signal.key, coalesce(signal.payload, 'null'::jsonb), signal.idempotency_key, at,
            at + make_interval(secs => keep_seconds), coalesce(left(sender, 200), session_user))
    ON CONFLICT (key, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id INTO sid;
    IF sid IS NULL THEN
        -- The same idempotency key committed by another sender meanwhile.
        RETURN QUERY SELECT s.id, 'duplicate'::text, s.job_id FROM __schema__.signals s
                     WHERE s.key = signal.key AND s.idempotency_key = signal.idempotency_key;
        RETURN;
    END IF;
    woken := __schema__.signal_deliver(sid, at, left(note, 1000));
    RETURN QUERY SELECT sid, CASE WHEN woken IS NULL THEN 'kept' ELSE 'delivered' END, woken;
END
$$;
REVOKE ALL ON FUNCTION __schema__.signal(text, jsonb, text, float8, text, text) FROM PUBLIC;

-- The recovery pass's part for signals: drops up to `batch` mailbox signals whose keeping time
-- ended (counted in signal_totals), and matches what a race between a send and a wait left
-- unmatched: every signal and wait not yet looked at is looked at once, after its commit, and
-- delivered where a partner exists. One left unmatched because its partner was locked elsewhere
-- is looked at again next time. Returns how many it delivered and how many it dropped.
CREATE FUNCTION __schema__.signals_sweep(batch integer)
RETURNS TABLE (delivered integer, expired integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    at timestamptz := statement_timestamp();
    n_delivered integer := 0;
    n_expired integer := 0;
    s record;
    w record;
    partner bigint;
BEGIN
    WITH doomed AS (
        SELECT id FROM __schema__.signals
        WHERE job_id IS NULL AND expires_at <= at
        ORDER BY expires_at
        LIMIT batch
        FOR UPDATE SKIP LOCKED
    ), dropped AS (
        DELETE FROM __schema__.signals x USING doomed d WHERE x.id = d.id AND x.job_id IS NULL RETURNING x.id
    )
    SELECT count(*) INTO n_expired FROM dropped;
    IF n_expired > 0 THEN
        INSERT INTO __schema__.signal_totals AS t (one, expired) VALUES (true, n_expired)
        ON CONFLICT (one) DO UPDATE SET expired = t.expired + excluded.expired;
    END IF;

    FOR s IN
        SELECT id, key, job_id IS NOT NULL AS delivered FROM __schema__.signals WHERE NOT swept ORDER BY id LIMIT batch
    LOOP
        IF s.delivered THEN
            UPDATE __schema__.signals SET swept = true WHERE id = s.id;
        ELSIF __schema__.signal_deliver(s.id, at) IS NOT NULL THEN
            n_delivered := n_delivered + 1;
        ELSIF NOT EXISTS (SELECT 1 FROM __schema__.job_waits x WHERE x.key = s.key AND x.state = 'waiting') THEN
            UPDATE __schema__.signals SET swept = true WHERE id = s.id;
        END IF;
    END LOOP;

    FOR w IN
        SELECT job_id, name, key, state FROM __schema__.job_waits WHERE NOT swept ORDER BY job_id LIMIT batch
    LOOP
        IF w.key IS NOT NULL AND w.state = 'waiting' THEN
            SELECT x.id INTO partner FROM __schema__.signals x
            WHERE x.key = w.key AND x.job_id IS NULL AND x.expires_at > at
            ORDER BY x.id LIMIT 1;
        ELSE
            partner := NULL;
        END IF;
        IF partner IS NOT NULL AND __schema__.signal_deliver(partner, at) IS NOT NULL THEN
            n_delivered := n_delivered + 1;
        ELSIF partner IS NULL THEN
            UPDATE __schema__.job_waits SET swept = true WHERE job_id = w.job_id AND name = w.name;
        END IF;
    END LOOP;
    RETURN QUERY SELECT n_delivered, n_expired;
END
$$;
REVOKE ALL ON FUNCTION __schema__.signals_sweep(integer) FROM PUBLIC;
