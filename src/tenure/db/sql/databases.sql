-- Databases on a server Tenure started itself (the embedded default), for `tenure embedded dsn
-- --database NAME`. {database} is filled in with a quoted identifier: identifiers cannot be
-- bound as parameters.

-- name: database_exists
SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = %(name)s) AS present;

-- name: database_create
CREATE DATABASE {database};

-- name: embedded_time_zone_utc
-- The embedded server keeps time in UTC, whatever the host's zone: psycopg reads a timestamp of
-- a session in 'UTC' without converting it to a zone (about 0.24 us less for each of the five a
-- claimed job carries, 0.7 us of worker CPU a job). Not in a transaction: ALTER SYSTEM refuses one.
ALTER SYSTEM SET timezone = 'UTC';

-- name: embedded_reload
SELECT pg_reload_conf();
