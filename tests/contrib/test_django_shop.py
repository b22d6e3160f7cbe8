"""The Django example shop's own test suite (examples/django_shop/shop/tests.py), run by Django's
test runner in a subprocess against each backend.

A subprocess because Django's settings are process-wide and set once: the shop's tests need
settings of their own (its INSTALLED_APPS, its database), which must not leak into the rest of
this test session. Django's runner creates and drops its own test database on the server, and
`migrate` gives it Tenure's schema through the contrib app's post_migrate hook."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from psycopg import conninfo

import tenure

SHOP = Path(__file__).resolve().parents[2] / "examples" / "django_shop"
SRC = Path(tenure.__file__).resolve().parents[1]

pytest.importorskip("django")


def with_db(dsn: str, dbname: str) -> str:
    params = conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return conninfo.make_conninfo(**params)  # type: ignore[arg-type]


def run_shop_tests(server_dsn: str, label: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        # A database name of its own: Django's runner creates test_<name> beside it.
        "SHOP_DSN": with_db(server_dsn, f"shop_{uuid.uuid4().hex[:10]}"),
        "PYTHONPATH": os.pathsep.join([str(SRC), str(SHOP)]),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("TENURE_DSN", None)
    return subprocess.run(
        [sys.executable, "manage.py", "test", label, "--noinput", "-v", "2"],
        cwd=SHOP,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "label",
    [
        "shop.tests.PlaceOrderTests",
        "shop.tests.JoinedTransactionTests",
        "shop.tests.BlockingEnqueueTests",
        "shop.tests.AtomicRequestsTests",
        "shop.tests.CommandTests",
        "shop.tests.SettingsTests",
    ],
)
def test_django_shop_suite(server_dsn: str, label: str) -> None:
    """The shop's tests pass under Django's runner: commit keeps order and job, rollback neither."""
    result = run_shop_tests(server_dsn, label)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Ran 0 tests" not in result.stderr, result.stderr
