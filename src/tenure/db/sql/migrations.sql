-- name: migrations_table_create
CREATE SCHEMA IF NOT EXISTS __schema__;
CREATE TABLE IF NOT EXISTS __schema__.schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: migrations_try_lock
-- Serialises concurrent `tenure migrate` runs on the same schema. Session-scoped, because a
-- no-transaction migration runs outside any transaction; tried, not waited for (see migrate.py).
SELECT pg_try_advisory_lock(hashtext('tenure.migrate'), hashtext(%(schema)s));

-- name: migrations_unlock
SELECT pg_advisory_unlock(hashtext('tenure.migrate'), hashtext(%(schema)s));

-- name: migrations_applied
SELECT version FROM __schema__.schema_migrations ORDER BY version;

-- name: migration_record
INSERT INTO __schema__.schema_migrations (version, name) VALUES (%(version)s, %(name)s);

-- name: migrations_table_exists
SELECT to_regclass(%(table)s) IS NOT NULL AS present;

-- name: lock_timeout_set
-- How long each statement of a migration step may wait for a lock (migrate.py, LOCK_TIMEOUT).
SELECT set_config('lock_timeout', %(timeout)s, false);

-- name: lock_timeout_set_local
SELECT set_config('lock_timeout', %(timeout)s, true);

-- name: lock_timeout_reset
RESET lock_timeout;
