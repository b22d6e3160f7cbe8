"""The FastAPI example shop (examples/fastapi_shop) with its lifespan running: the client opened
at start-up, a worker in-process, both stopped at shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient
from starlette.applications import Starlette

import tenure
from tenure.contrib.asgi import lifespan
from tenure.model.errors import SchemaNotMigrated

SHOP = Path(__file__).resolve().parents[2] / "examples" / "fastapi_shop"
SRC = Path(tenure.__file__).resolve().parents[1]


@pytest.fixture
def shop_api(dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The example's ASGI app, its Tenure app pointed at this test's database."""
    monkeypatch.setenv("TENURE_DSN", dsn)  # the example's app takes $TENURE_DSN, as any user's would
    monkeypatch.syspath_prepend(str(SHOP))
    from fastapi_shop.main import api

    yield api
    sys.modules.pop("fastapi_shop.main", None)
    sys.modules.pop("fastapi_shop.tasks", None)
    sys.modules.pop("fastapi_shop", None)


def wait_for_state(client: TestClient, job_id: int, state: str, timeout: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/jobs/{job_id}").json()
        if job["state"] == state or time.monotonic() > deadline:
            return job
        time.sleep(0.05)


def test_endpoint_job_runs_in_process_worker(shop_api: Any, dsn: str) -> None:
    """A job an endpoint enqueued is run to success by the lifespan's worker, stopped at shutdown."""
    with TestClient(shop_api) as client:
        response = client.post("/orders", json={"email": "a@example.com"})
        assert response.status_code == 201, response.text
        placed = response.json()
        job = wait_for_state(client, placed["job"], "succeeded")
        assert job["state"] == "succeeded", job
        assert job["result"] == f"receipt for order {placed['order']} sent to a@example.com"
        runtime = client.app_state["tenure"]
        assert runtime.worker is not None and runtime.worker.started.is_set()
    assert runtime.worker.stopping.is_set()
    assert runtime.worker.stats.succeeded == 1


def test_declined_endpoint_leaves_neither_order_nor_job(shop_api: Any, dsn: str) -> None:
    """An endpoint that raises inside its transaction leaves neither its order nor its job."""
    with TestClient(shop_api) as client:
        response = client.post("/orders", json={"email": "b@declined.example"})
        assert response.status_code == 402, response.text
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM tenure.jobs").fetchone() == (0,)


def test_lifespan_start_fails_when_worker_cannot_start(empty_dsn: str) -> None:
    """A worker that cannot start (schema not migrated) fails the app's start-up with its own error."""
    app = tenure.Tenure(empty_dsn)
    asgi = Starlette(lifespan=lifespan(app, worker=True))
    with pytest.raises(SchemaNotMigrated), TestClient(asgi):
        pass


#: The example's two tests take a few seconds; past this, its pytest prints every thread's stack.
STACKS_AFTER = 60
#: ... and past this the run is stopped, and what its database was doing is reported.
GIVE_UP_AFTER = 120


@pytest.mark.slow
def test_the_examples_own_tests_pass(empty_dsn: str) -> None:
    """examples/fastapi_shop/test_shop.py, the test docs/fastapi.md shows, passes as a reader runs it."""
    env = {**os.environ, "TENURE_DSN": empty_dsn, "PYTHONPATH": os.pathsep.join([str(SRC), str(SHOP)])}
    # This repository's addopts (xdist) and cache are not the reader's. Live logs and a stack
    # dump say where a run that hangs stood, instead of only that it timed out.
    command = [sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider"]
    command += [
        "-o",
        f"faulthandler_timeout={STACKS_AFTER}",
        "-o",
        "log_cli=true",
        "-o",
        "log_cli_level=INFO",
    ]
    with subprocess.Popen(
        [*command, "test_shop.py"],
        cwd=SHOP,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as run:
        try:
            output, _ = run.communicate(timeout=GIVE_UP_AFTER)
        except subprocess.TimeoutExpired:
            sessions = _sessions(empty_dsn)
            run.kill()
            output, _ = run.communicate()
            pytest.fail(f"the example's tests hung; its sessions then:\n{sessions}\n{output}")
    assert run.returncode == 0, output
    assert "2 passed" in output, output


def _sessions(dsn: str) -> str:
    """What each session of the example's database was doing: a lock wait, a statement, idle."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT application_name, state, wait_event_type, wait_event, left(query, 200)"
            " FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return "\n".join(" | ".join(str(v) for v in row) for row in rows) or "(none)"
