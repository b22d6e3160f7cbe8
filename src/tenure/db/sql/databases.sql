-- Databases on a server Tenure started itself (the embedded default), for `tenure embedded dsn
-- --database NAME`. {database} is filled in with a quoted identifier: identifiers cannot be
-- bound as parameters.

-- name: database_exists
SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = %(name)s) AS present;

-- name: database_create
CREATE DATABASE {database};
