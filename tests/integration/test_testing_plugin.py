"""The pytest plugin as a project's test run uses it: pytest in a folder of its own, in
pytest-asyncio's strict and auto modes and without it, gives each test the app on a schema of its
own, emptied before each test and dropped at the end, where the default schema's jobs are
neither seen nor touched; the app is found, or asked for by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]

TASKS = """
import tenure

app = tenure.Tenure()


@app.task(queue="mail")
async def send_receipt(ctx: tenure.JobContext, order_id: int) -> str:
    return f"sent {order_id}"


@app.task
def place_order(ctx: tenure.JobContext, order_id: int) -> None:
    send_receipt.enqueue_sync(order_id=order_id)
"""

ASYNC_TESTS = """
import pytest

from shop.tasks import place_order, send_receipt


@pytest.mark.asyncio
async def test_async_first(tenure_inline):
    assert tenure_inline.app.schema.startswith("tenure_test_")
    assert await tenure_inline.enqueued() == []
    await place_order.enqueue(order_id=1)
    runs = await tenure_inline.drain()
    assert [r.state for r in runs] == ["succeeded", "succeeded"]


@pytest.mark.asyncio
async def test_async_second(tenure_inline):
    assert await tenure_inline.enqueued(state=("pending", "succeeded")) == []
    job = await send_receipt.enqueue(order_id=2)
    assert (await tenure_inline.run_job(job.id)).result == "sent 2"
"""

SYNC_TESTS = """
from shop.tasks import place_order, send_receipt


def test_sync_first(tenure_inline_sync):
    t = tenure_inline_sync
    assert t.enqueued(state=("pending", "succeeded")) == []
    place_order.enqueue_sync(order_id=3)
    [job] = t.assert_enqueued(place_order, order_id=3)
    assert t.run_job(job.id).state == "succeeded"
    [receipt] = t.assert_enqueued(send_receipt, order_id=3, queue="mail")
    assert t.run_job(receipt.id).result == "sent 3"


def test_sync_second(tenure_app, tenure_inline_sync):
    assert tenure_inline_sync.enqueued(state=("pending", "succeeded")) == []
    assert tenure_app.enqueue_sync(send_receipt, {"order_id": 4}).id > 0
    tenure_inline_sync.assert_enqueued(send_receipt, count=1)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "tasks.py").write_text(TASKS)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_async.py").write_text(ASYNC_TESTS)
    (tmp_path / "tests" / "test_sync.py").write_text(SYNC_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    return tmp_path


def run_pytest(project: Path, dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in the project's folder: the plugin comes in by its entry point, as in a project that
    installed Tenure (this repository's install registers it)."""
    env = {**os.environ, "TENURE_DSN": dsn, "PYTHONPATH": str(ROOT / "src")}
    env.pop("PYTEST_XDIST_WORKER", None)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    return subprocess.run(
        [*argv, "-p", "no:xdist", *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )


def test_schemas(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'tenure_test_%'").fetchall()
    return [r[0] for r in rows]


test_schemas.__test__ = False  # type: ignore[attr-defined]


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_each_test_gets_the_app_on_an_empty_schema_of_its_own(project: Path, dsn: str, mode: str) -> None:
    """In strict and in auto mode, async tests (tenure_inline) and blocking ones
    (tenure_inline_sync, tenure_app) each start with no job, run their own, never see the job
    waiting in the default schema, which stays pending; the test schema is gone afterwards."""
    with psycopg.connect(dsn) as conn:
        waiting = conn.execute(
            "INSERT INTO tenure.jobs (queue, task, payload) VALUES ('mail', 'shop.tasks.send_receipt', "
            "'{\"order_id\": 99}') RETURNING id"
        ).fetchone()
    assert waiting is not None
    done = run_pytest(project, dsn, "-o", f"asyncio_mode={mode}")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 passed" in done.stdout
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT state::text, attempt_count FROM tenure.jobs WHERE id = %s", waiting
        ).fetchone()
    assert row == ("pending", 0)
    assert test_schemas(dsn) == []


def test_blocking_tests_need_no_pytest_asyncio(project: Path, dsn: str) -> None:
    """With pytest-asyncio switched off, the blocking fixtures work; a test asking for
    tenure_inline is told it is an async fixture."""
    (project / "tests" / "test_async.py").write_text(
        "def test_asks_for_the_async_fixture(tenure_inline):\n    pass\n"
    )
    done = run_pytest(project, dsn, "-p", "no:asyncio")
    assert done.returncode != 0
    assert "2 passed" in done.stdout and "1 error" in done.stdout, done.stdout[-4000:]
    assert "requested an async fixture 'tenure_inline'" in done.stdout


def test_the_app_is_asked_for_by_name_when_there_are_several(project: Path, dsn: str) -> None:
    """Two apps imported: the run stops, naming both and the setting; named, the tests pass."""
    (project / "shop" / "billing.py").write_text("import tenure\n\nbilling = tenure.Tenure()\n")
    (project / "tests" / "conftest.py").write_text("import shop.billing  # noqa: F401\n")
    done = run_pytest(project, dsn, "tests/test_sync.py")
    assert done.returncode != 0
    message = done.stdout + done.stderr
    assert "several Tenure apps (shop.billing:billing, shop.tasks:app)" in message, message[-3000:]
    assert 'tenure_app = "shop.tasks"' in message
    done = run_pytest(project, dsn, "tests/test_sync.py", "--tenure-app", "shop.tasks:app")
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:]
    (project / "pytest.ini").write_text("[pytest]\npythonpath = .\ntenure_app = shop.tasks\n")
    done = run_pytest(project, dsn, "tests/test_sync.py")
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:]
