"""A Django project's Tenure commands and hints speak manage.py: `manage.py tenure ...` runs the
operator commands on the database settings.TENURE names, and an unmigrated schema's error names
`manage.py tenure_migrate`, not `tenure migrate --dsn`, which would migrate another database.

Each command runs as a user runs it, `python manage.py ...` in the example shop
(examples/django_shop), with no $TENURE_DSN: the database comes from its settings alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import tenure

pytest.importorskip("django")

SHOP = Path(__file__).resolve().parents[2] / "examples" / "django_shop"
SRC = Path(tenure.__file__).resolve().parents[1]


def manage(dsn: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SHOP_DSN": dsn, "PYTHONPATH": os.pathsep.join([str(SRC), str(SHOP)])}
    env.pop("TENURE_DSN", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", *argv], cwd=SHOP, env=env, capture_output=True, text=True, timeout=120
    )


def jobs(dsn: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT id, task, queue, payload FROM tenure.jobs ORDER BY id").fetchall()


@pytest.mark.slow
def test_manage_py_tenure_runs_operator_commands_on_the_projects_database(dsn: str) -> None:
    """manage.py tenure enqueue, show, status and dead list work on the database of settings.TENURE."""
    enqueued = manage(dsn, "tenure", "enqueue", "shop.tasks.send_receipt", "--payload", '{"order_id": 7}')
    assert enqueued.returncode == 0, enqueued.stderr
    [(job_id, task, queue, payload)] = jobs(dsn)
    assert (task, queue, payload) == ("shop.tasks.send_receipt", "emails", {"order_id": 7})

    shown = manage(dsn, "tenure", "show", str(job_id), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["job"]["payload"] == {"order_id": 7}

    status = manage(dsn, "tenure", "status")
    assert status.returncode == 0, status.stderr
    assert "emails" in status.stdout

    dead = manage(dsn, "tenure", "dead", "list")
    assert dead.returncode == 0, dead.stderr


@pytest.mark.slow
def test_hints_in_a_django_project_name_manage_py_and_following_them_works(empty_dsn: str) -> None:
    """With no schema, manage.py tenure, tenure_worker and an enqueue from project code say to run
    manage.py tenure_migrate (never --dsn); after running it, the command succeeds."""
    status = manage(empty_dsn, "tenure", "status")
    worker = manage(empty_dsn, "tenure_worker")
    enqueue = manage(
        empty_dsn, "shell", "-c", "from shop.tasks import send_receipt; send_receipt.enqueue_sync(order_id=1)"
    )
    assert status.returncode == 4, status.stderr
    assert worker.returncode != 0, worker.stderr
    assert enqueue.returncode != 0, enqueue.stderr
    for done in (status, worker, enqueue):
        error = " ".join(done.stderr.split())
        assert "`python manage.py tenure_migrate`" in error, error
        assert "settings.TENURE" in error, error
        assert "--dsn" not in error, error

    other = manage(empty_dsn, "tenure", "status", "--schema", "billing")
    assert other.returncode == 4
    assert "`python manage.py tenure migrate --schema billing`" in " ".join(other.stderr.split())

    migrated = manage(empty_dsn, "tenure_migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert manage(empty_dsn, "tenure", "status").returncode == 0


@pytest.mark.slow
def test_commands_with_databases_of_their_own_are_refused(dsn: str) -> None:
    """manage.py tenure demo exits 1 with one line saying to run it outside manage.py; nothing is written."""
    done = manage(dsn, "tenure", "demo")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "CommandError: `tenure demo` works on a database of its own, not your project's: run it as "
        "`tenure demo` outside manage.py"
    ]
    assert jobs(dsn) == []
