-- What a connection learns about a pooler between it and PostgreSQL. Schema-independent.

-- name: backend_pid
-- The pid of the server session running this statement. On a direct connection it is the pid the
-- connection's startup reported; a pooler answers the startup with a cancel key of its own.
SELECT pg_backend_pid() AS pid;

-- name: prepared_statement_probe
-- Prepared by the probe of tenure.db.pooler. The marker tells its answer from that of another
-- client's statement with the same name on the server session the run lands on; the probe's own
-- nonce, put in place of __probe_nonce__, tells it from an earlier probe's statement left there.
SELECT pg_backend_pid() AS pid, %(marker)s::text AS marker, '__probe_nonce__' AS nonce;
