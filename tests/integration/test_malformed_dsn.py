"""A DSN the worker or a command cannot use is reported by the part that is wrong (its scheme, a
quote, a setting, the port), never with its password, and the worker says "started" only once it
has connected and declared its tasks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tenure.ops.cli import EXIT_UNAVAILABLE

TESTS_DIR = Path(__file__).resolve().parents[1]
SECRET = "hunter2secret"

#: A malformed DSN, and what its error must say.
MALFORMED = [
    (
        f"mysql://alice:{SECRET}@db.example.com/shop",
        "the DSN's scheme is mysql://; Tenure needs postgresql://",
    ),
    (f"postgresql+psycopg://alice:{SECRET}@127.0.0.1/shop", "without the driver after '+'"),
    (f"host=127.0.0.1 password=hunter2 {SECRET}", "could not be parsed after its password"),
    (f"host=127.0.0.1 password='{SECRET}", "the DSN's password value opens a quote that never closes"),
    ("host=127.0.0.1 dbname", 'could not be parsed near "dbname"'),
    ("host=127.0.0.1 passwrd=x", 'unknown setting "passwrd"'),
    (f"postgresql://alice:{SECRET}@[::1/shop", 'in URI: "postgresql://alice:***@[::1/shop"'),
    (f"postgresql://alice:hunter2@{SECRET}@127.0.0.1/shop", "the DSN's host contains '@'"),
    (f"postgresql://alice:hunter2/{SECRET}@127.0.0.1/shop", "the DSN's port is not a number"),
    (f"postgresql://alice:{SECRET}@127.0.0.1:notaport/shop", "the DSN's port 'notaport' is not a number"),
]


def tenure(*args: str, cwd: Path = TESTS_DIR) -> subprocess.CompletedProcess[str]:
    """`python -m tenure ARGS` as a user runs it, with no $TENURE_DSN."""
    env = {k: v for k, v in os.environ.items() if k != "TENURE_DSN"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "tenure", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(("dsn", "says"), MALFORMED)
@pytest.mark.parametrize("command", [["status"], ["worker", "apps.shop_app"]])
def test_a_malformed_dsn_names_what_is_wrong_and_hides_the_password(
    dsn: str, says: str, command: list[str]
) -> None:
    """`tenure status --dsn` and `tenure worker --dsn` with a malformed DSN exit 3 naming the
    wrong part of it, without the password and without the worker's "started" banner."""
    done = tenure(*command, "--dsn", dsn)
    error = " ".join(done.stderr.split())
    assert done.returncode == EXIT_UNAVAILABLE, error
    assert says in error, error
    assert SECRET not in done.stdout + done.stderr
    assert "started" not in error and done.stdout == ""


def test_the_worker_announces_itself_only_once_connected() -> None:
    """A worker whose database refuses the connection exits 3 with the reason and never prints its
    start-up banner."""
    done = tenure("worker", "apps.shop_app", "--dsn", "postgresql://alice@127.0.0.1:1/shop")
    error = " ".join(done.stderr.split())
    assert done.returncode == EXIT_UNAVAILABLE, error
    assert "cannot connect to PostgreSQL at alice@127.0.0.1:1/shop" in error
    assert "started" not in error, error


def test_a_malformed_tenure_dsn_variable_is_named_as_the_source(tmp_path: Path) -> None:
    """A malformed $TENURE_DSN is reported as the variable's, so a user who gave no --dsn knows
    where to look."""
    env = {**os.environ, "TENURE_DSN": f"mysql://alice:{SECRET}@db/shop"}
    done = subprocess.run(
        [sys.executable, "-m", "tenure", "status"], env=env, capture_output=True, text=True, timeout=60
    )
    error = " ".join(done.stderr.split())
    assert done.returncode == EXIT_UNAVAILABLE
    assert "the DSN's scheme is mysql://" in error and "(in $TENURE_DSN)" in error, error
    assert SECRET not in error
