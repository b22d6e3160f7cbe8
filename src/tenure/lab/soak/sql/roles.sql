-- The soak's workers run as a least-privilege role, so that a revoked grant really bites
-- (a superuser bypasses every privilege). {role}, {database} and {schema} are quoted identifiers.

-- name: soak_role_create
CREATE ROLE {role} LOGIN;

-- name: soak_role_bank_grants
-- What the bank's transfers write (and the refused transfer tries to), beside the worker's own
-- GRANTs on Tenure's schema.
GRANT USAGE ON SCHEMA bank TO {role};
GRANT SELECT, INSERT, UPDATE ON bank.accounts TO {role};
GRANT SELECT, INSERT ON bank.ledger TO {role};

-- name: soak_role_maintain
-- From PostgreSQL 17: the workers vacuum `jobs` themselves (tenure.worker.maintenance.vacuum), so
-- the soak's faults meet their vacuums too. `tenure roles` leaves this grant to the operator.
GRANT MAINTAIN ON {schema}.jobs TO {role};

-- name: soak_role_revoke_update
REVOKE UPDATE ON {schema}.jobs FROM {role};

-- name: soak_role_drop
DROP OWNED BY {role};
DROP ROLE IF EXISTS {role};

-- name: soak_database_read_only
ALTER DATABASE {database} SET default_transaction_read_only = on;

-- name: soak_database_writable
ALTER DATABASE {database} RESET default_transaction_read_only;

-- name: soak_role_exists
SELECT count(*) AS n FROM pg_roles WHERE rolname = %(name)s;
