"""Errors of the connection, a pooler or the server are transient: a job's attempts are spent on
the job's own failures, not on PgBouncer losing a prepared statement or a failover."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from tenure.db.connect import is_connection_lost, parse_prepare_threshold, prepare_threshold
from tenure.db.text import storable_text
from tenure.model.errors import ConfigurationError
from tenure.model.retry import FailureClass, FailurePolicy, is_infrastructure_error

INFRASTRUCTURE = ["08006", "08001", "26000", "42P05", "25006", "57P01", "57P03", "53300", "53100", "57014"]


@pytest.mark.parametrize("sqlstate", INFRASTRUCTURE)
def test_infrastructure_sqlstates_are_transient(sqlstate: str) -> None:
    """Each SQLSTATE of the connection, pooler or server classifies as transient, not unknown."""
    error = psycopg.errors.lookup(sqlstate)(f"simulated {sqlstate}")
    assert error.sqlstate == sqlstate
    assert is_infrastructure_error(error)
    assert FailurePolicy().classify(error) is FailureClass.TRANSIENT


@pytest.mark.parametrize("sqlstate", ["23505", "22P02", "42P01"])
def test_the_jobs_own_database_errors_are_not_infrastructure(sqlstate: str) -> None:
    """A unique violation, bad input or a missing table is about the job: not transient by default."""
    error = psycopg.errors.lookup(sqlstate)("simulated")
    assert not is_infrastructure_error(error)
    assert FailurePolicy().classify(error) is FailureClass.UNKNOWN


def test_a_broken_connection_without_sqlstate_and_a_pool_timeout_are_transient() -> None:
    """A connection that broke (no SQLSTATE), an unusable one, and an exhausted pool are transient."""
    for error in (
        psycopg.OperationalError("server closed"),
        psycopg.InterfaceError("closed"),
        PoolTimeout("x"),
    ):
        assert FailurePolicy().classify(error) is FailureClass.TRANSIENT


def test_prepare_threshold_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """TENURE_PREPARE_THRESHOLD=none turns prepared statements off; a number sets the threshold."""
    monkeypatch.setenv("TENURE_PREPARE_THRESHOLD", "none")
    assert prepare_threshold() is None
    monkeypatch.setenv("TENURE_PREPARE_THRESHOLD", "0")
    assert prepare_threshold() == 0
    monkeypatch.delenv("TENURE_PREPARE_THRESHOLD")
    assert prepare_threshold() == 5


def test_a_bad_prepare_threshold_is_refused_with_the_fix() -> None:
    """A value that is neither a count nor 'none' is refused, naming what to give instead."""
    with pytest.raises(ConfigurationError, match="'none' to never prepare"):
        parse_prepare_threshold("sometimes")


def test_tenure_worker_refuses_a_bad_prepare_threshold_before_connecting() -> None:
    """`tenure worker --prepare-threshold bogus` exits 2 with the reason, touching no database."""
    env = {**os.environ, "TENURE_DSN": "postgresql://nobody@127.0.0.1:1/none"}
    done = subprocess.run(
        [sys.executable, "-m", "tenure.ops.cli", "worker", "nowhere", "--prepare-threshold", "bogus"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert "--prepare-threshold" in done.stderr and "none" in done.stderr


def test_storable_text_replaces_what_postgresql_cannot_hold() -> None:
    """NUL becomes a visible stand-in and a lone surrogate a replacement mark; the rest is kept."""
    assert storable_text("a\x00b\udcffc", 100) == "a\\x00b?c"
    assert storable_text("ünïcode ok") == "ünïcode ok"
    assert storable_text("x" * 10, 4) == "xxxx"


def test_a_client_out_of_step_with_its_server_is_a_lost_connection_not_a_server_fault() -> None:
    """psycopg's InternalError without a SQLSTATE (two results for one COMMIT, as PgBouncer gives
    when its server restarts mid-transaction) is a lost connection and transient; the server's
    own internal error (XX000) is neither."""
    out_of_step = psycopg.InternalError("received 2 results from command 'COMMIT'")
    assert is_connection_lost(out_of_step) and is_infrastructure_error(out_of_step)
    assert FailurePolicy().classify(out_of_step) is FailureClass.TRANSIENT
    server_fault = psycopg.errors.lookup("XX000")("could not read block 7")
    assert not is_connection_lost(server_fault) and not is_infrastructure_error(server_fault)
    assert is_connection_lost(psycopg.OperationalError("server closed the connection unexpectedly"))


def test_a_database_tenure_cannot_reach_is_transient() -> None:
    """DatabaseUnavailable (a handler's blocking pool that cannot open, a lost connection) is the
    infrastructure's failure, never a spend of the job's unknown budget."""
    from tenure.model.errors import DatabaseUnavailable

    error = DatabaseUnavailable("lost the connection to PostgreSQL at 127.0.0.1:5432/app")
    assert is_infrastructure_error(error)
    assert FailurePolicy().classify(error) is FailureClass.TRANSIENT
