"""A Django project's Tenure commands and hints speak manage.py: `manage.py tenure ...` runs the
operator commands on the database settings.TENURE names, and an unmigrated schema's error names
`manage.py tenure_migrate`, not `tenure migrate --dsn`, which would migrate another database.

Each command runs as a user runs it, `python manage.py ...` in the example shop
(examples/django_shop), with no $TENURE_DSN: the database comes from its settings alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def wait_for(condition: Callable[[], Any], process: subprocess.Popen[str], what: str) -> Any:
    deadline = time.monotonic() + 60
    while not (value := condition()):
        assert process.poll() is None, f"exited {process.returncode} before {what}: {process.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def registered(dsn: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT id FROM tenure.workers").fetchall()


@pytest.mark.slow
def test_manage_py_tenure_worker_runs_the_app_of_the_settings(dsn: str) -> None:
    """manage.py tenure worker, given no app, runs settings.TENURE["APP"] (as tenure_worker does):
    it registers, announces the app, and stops cleanly on SIGTERM."""
    env = {**os.environ, "SHOP_DSN": dsn, "PYTHONPATH": os.pathsep.join([str(SRC), str(SHOP)])}
    env.pop("TENURE_DSN", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    argv = ["manage.py", "tenure", "worker", "--worker-id", "shop-cli-1", "--poll-interval", "0.1"]
    with subprocess.Popen(
        [sys.executable, *argv], cwd=SHOP, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as worker:
        try:
            wait_for(lambda: registered(dsn), worker, "its registry row")
        finally:
            worker.send_signal(signal.SIGTERM)
            _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    banner = " ".join(err.split())
    assert "tenure worker shop-cli-1 started" in banner and "app shop.tasks:app" in banner, banner


@pytest.mark.slow
def test_the_shop_runs_on_the_embedded_server_through_tenure_embedded_dsn() -> None:
    """docs/django.md's embedded steps: `tenure embedded dsn --database shop` starts the embedded
    server, creates the database and prints its DSN, on which manage.py migrate and manage.py
    tenure status work; asked again, it prints the same DSN and creates nothing."""
    from tenure.db.embedded import stop_embedded

    data_dir = Path(tempfile.mkdtemp(prefix="tenure-emb-"))  # short: the socket's path is bounded
    env = {k: v for k, v in os.environ.items() if k not in ("TENURE_DSN", "DJANGO_SETTINGS_MODULE")}
    env["TENURE_DATA_DIR"] = str(data_dir)
    command = [sys.executable, "-m", "tenure", "embedded", "dsn", "--database", "shop"]
    try:
        first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stderr
        shop_dsn = first.stdout.strip()
        assert "created database shop" in first.stderr
        again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert (again.returncode, again.stdout.strip(), again.stderr) == (0, shop_dsn, "")
        with psycopg.connect(shop_dsn) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("shop",)
        migrated = manage(shop_dsn, "migrate")
        assert migrated.returncode == 0, migrated.stderr
        status = manage(shop_dsn, "tenure", "status")
        assert status.returncode == 0, status.stderr
    finally:
        stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
