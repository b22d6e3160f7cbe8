-- Statements the transaction runner issues at the start of a unit of work. Schema-independent.

-- name: txn_isolation_serializable
SET TRANSACTION ISOLATION LEVEL SERIALIZABLE;

-- name: txn_isolation_repeatable_read
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ;

-- name: txn_lock_timeout
-- Transaction-scoped, so it never leaks to the next user of a pooled connection.
SELECT set_config('lock_timeout', %(lock_timeout)s, true);
