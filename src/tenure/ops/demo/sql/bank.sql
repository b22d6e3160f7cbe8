-- The demo bank: its database, its tables, the transfer's statements, and the read-only
-- queries behind the progress bar and the final report.
-- __schema__ is the (quoted) Tenure schema; {database} is filled in with a quoted identifier.

-- name: demo_database_drop
DROP DATABASE IF EXISTS {database} WITH (FORCE);

-- name: demo_database_create
CREATE DATABASE {database};

-- name: bank_create
-- The ledger's idempotency key is deliberately NOT unique: a constraint would turn a fencing
-- bug into a quiet constraint error, while without one a double-applied transfer stays in the
-- data for the invariant check to find.
CREATE SCHEMA bank;
CREATE TABLE bank.accounts (
    id              integer PRIMARY KEY,
    opening_balance bigint NOT NULL,
    balance         bigint NOT NULL
);
CREATE TABLE bank.ledger (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id          bigint NOT NULL,
    idempotency_key uuid NOT NULL,
    token           bigint NOT NULL,
    source          integer NOT NULL REFERENCES bank.accounts (id),
    target          integer NOT NULL REFERENCES bank.accounts (id),
    amount          bigint NOT NULL CHECK (amount > 0),
    written_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX ledger_idempotency_key_idx ON bank.ledger (idempotency_key);

-- name: bank_open_accounts
INSERT INTO bank.accounts (id, opening_balance, balance)
SELECT id, balance, balance
FROM unnest(%(ids)s::integer[], %(balances)s::bigint[]) AS u(id, balance);

-- name: transfer_lock_accounts
-- Both rows in ascending id order: the sort sits below the row locks, so every transfer
-- locks its pair lowest id first and two transfers can never wait on each other in a cycle.
SELECT id, balance
FROM bank.accounts
WHERE id IN (%(source)s, %(target)s)
ORDER BY id
FOR UPDATE;

-- name: transfer_apply
-- Moves the money and writes the ledger row, both keyed to the job that did it.
WITH moved AS (
    UPDATE bank.accounts
    SET balance = balance + CASE WHEN id = %(source)s THEN -%(amount)s::bigint ELSE %(amount)s::bigint END
    WHERE id IN (%(source)s, %(target)s)
    RETURNING id
)
INSERT INTO bank.ledger (job_id, idempotency_key, token, source, target, amount)
SELECT %(job_id)s, %(idempotency_key)s, %(token)s, %(source)s, %(target)s, %(amount)s
WHERE (SELECT count(*) FROM moved) = 2;

-- name: demo_progress
-- What the progress bar shows; cheap enough to run a few times a second.
SELECT count(*) FILTER (WHERE state IN ('succeeded', 'dead', 'cancelled')) AS finished,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'dead') AS dead,
       count(*) FILTER (WHERE state = 'running') AS running,
       (SELECT count(*) FROM __schema__.job_events WHERE event = 'lease_expired') AS expired,
       (SELECT count(*) FROM __schema__.job_events WHERE event = 'fencing_lost') AS fenced
FROM __schema__.jobs
WHERE task = %(task)s;

-- name: demo_running_by_owner
SELECT count(*) AS running
FROM __schema__.jobs
WHERE state = 'running' AND lease_owner = %(owner)s;

-- name: report_job_states
SELECT state::text AS state, count(*) AS jobs
FROM __schema__.jobs
WHERE task = %(task)s
GROUP BY state
ORDER BY state;

-- name: report_dead_codes
SELECT coalesce(last_error_code, '?') AS code, count(*) AS jobs
FROM __schema__.jobs
WHERE task = %(task)s AND state = 'dead'
GROUP BY 1
ORDER BY 2 DESC, 1;

-- name: report_events
-- The audit log, by event and by the state or error code that qualifies it.
SELECT event,
       coalesce(to_state::text, '') AS to_state,
       coalesce(error_code, '') AS error_code,
       count(*) AS n,
       count(DISTINCT job_id) AS jobs
FROM __schema__.job_events
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;

-- name: report_recovered_outcomes
-- What became of the jobs whose lease expired at least once.
SELECT j.state::text AS state, count(*) AS jobs
FROM __schema__.jobs j
WHERE j.task = %(task)s
  AND EXISTS (SELECT 1 FROM __schema__.job_events e WHERE e.job_id = j.id AND e.event = 'lease_expired')
GROUP BY 1
ORDER BY 1;

-- name: invariant_money
SELECT sum(opening_balance) AS expected, sum(balance) AS actual FROM bank.accounts;

-- name: invariant_no_overdraft
SELECT count(*) FILTER (WHERE balance < 0) AS violations, min(balance) AS lowest FROM bank.accounts;

-- name: invariant_balances_match_ledger
-- Every balance is its opening balance plus what the ledger says came in, minus what went out.
SELECT count(*) AS violations
FROM bank.accounts a
WHERE a.balance <> a.opening_balance
    + coalesce((SELECT sum(amount) FROM bank.ledger l WHERE l.target = a.id), 0)
    - coalesce((SELECT sum(amount) FROM bank.ledger l WHERE l.source = a.id), 0);

-- name: invariant_applied_once
-- Each succeeded transfer has exactly one ledger row, written under the token that completed it.
SELECT count(*) AS succeeded,
       count(*) FILTER (WHERE l.rows <> 1) AS not_once,
       count(*) FILTER (WHERE l.rows > 1) AS duplicated,
       count(*) FILTER (WHERE l.rows = 1 AND l.tokens[1] <> j.lease_token) AS wrong_token
FROM __schema__.jobs j
CROSS JOIN LATERAL (
    SELECT count(*) AS rows, array_agg(token) AS tokens
    FROM bank.ledger
    WHERE idempotency_key = j.idempotency_key
) l
WHERE j.task = %(task)s AND j.state = 'succeeded';

-- name: invariant_no_stray_ledger
-- Ledger rows of jobs that did not succeed: a stale attempt whose writes survived its fence.
SELECT count(*) AS violations
FROM bank.ledger l
LEFT JOIN __schema__.jobs j ON j.idempotency_key = l.idempotency_key
WHERE j.id IS NULL OR j.state <> 'succeeded' OR j.id <> l.job_id;

-- name: invariant_jobs_accounted
SELECT count(*) AS total,
       count(*) FILTER (WHERE state IN ('succeeded', 'dead', 'cancelled')) AS terminal,
       count(*) FILTER (WHERE state IN ('scheduled', 'pending', 'running')) AS unfinished
FROM __schema__.jobs
WHERE task = %(task)s;
