"""A real `manage.py tenure_worker` gets its ORM connections back after the server drops them.

The worker runs the example shop's app (examples/django_shop) with the probe's tasks
(tests/contrib/django_probe), each reporting the server process behind its thread's Django
connection. The test terminates those processes with pg_terminate_backend, as a database
restart, a failover or an idle timeout would, between jobs and in the middle of one, and the
jobs after it still succeed: before each handler, and after it, in the handler's own thread, the
contrib closes the connections Django itself would drop (tenure.contrib.django.connections)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import tenure
from tenure.model.jobs import Job

pytest.importorskip("django")

ROOT = Path(__file__).resolve().parents[2]
SHOP = ROOT / "examples" / "django_shop"
PROBE = Path(__file__).resolve().parent / "django_probe"
SRC = Path(tenure.__file__).resolve().parents[1]

#: Django's connection settings under test: closed after each job, or kept across jobs with and
#: without Django's health check at first use.
CONFIGS = {
    "conn_max_age_0": {"PROBE_CONN_MAX_AGE": "0"},
    "persistent_health_checks": {"PROBE_CONN_MAX_AGE": "none", "PROBE_HEALTH_CHECKS": "1"},
    "persistent_no_health_checks": {"PROBE_CONN_MAX_AGE": "none"},
}


def django_env(dsn: str, config: dict[str, str]) -> dict[str, str]:
    env = {
        **os.environ,
        **config,
        "SHOP_DSN": dsn,
        "DJANGO_SETTINGS_MODULE": "probe_settings",
        "PYTHONPATH": os.pathsep.join([str(SRC), str(SHOP), str(PROBE)]),
    }
    env.pop("TENURE_DSN", None)
    return env


@pytest.fixture
def worker(request: pytest.FixtureRequest, dsn: str, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """`manage.py migrate`, then `manage.py tenure_worker` with two threads, on this test's database."""
    env = django_env(dsn, CONFIGS[request.param])
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=SHOP,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "tenure_worker", "--concurrency", "2", "--poll-interval", "0.1"],
        cwd=SHOP,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


def finished(client: tenure.SyncClient, job_id: int, worker: subprocess.Popen[str], log: Path) -> Job:
    """The job once it has succeeded or died (the worker must stay up meanwhile)."""
    deadline = time.monotonic() + 90
    while True:
        job = client.get_job(job_id)
        assert job is not None
        if job.state.value in ("succeeded", "dead"):
            return job
        assert worker.poll() is None, f"the worker exited: {log.read_text()}"
        assert time.monotonic() < deadline, f"job {job_id} is still {job.state.value}"
        time.sleep(0.05)


def wait_for_file(path: Path, worker: subprocess.Popen[str], log: Path) -> str:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert worker.poll() is None, f"the worker exited: {log.read_text()}"
        assert time.monotonic() < deadline, f"no {path.name} from the job"
        time.sleep(0.02)
    return path.read_text()


def alive(dsn: str, pids: list[int]) -> list[int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).fetchall()
    return sorted(row[0] for row in rows)


def terminate(dsn: str, pid: int) -> None:
    """Ends the server process `pid` and waits until it has gone, as a restart would."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone()
    assert row == (True,), f"server process {pid} did not end"


def orders(dsn: str, email: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM shop_order WHERE email = %s", (email,)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
@pytest.mark.parametrize("worker", list(CONFIGS), indirect=True)
def test_jobs_succeed_after_the_orm_connection_is_terminated(
    worker: subprocess.Popen[str], request: pytest.FixtureRequest, dsn: str, tmp_path: Path
) -> None:
    """After both pool threads' ORM connections are terminated between jobs, and one job's in the
    middle of its run, every later job succeeds on a new connection, and the interrupted job
    succeeds at its second attempt."""
    config = request.node.callspec.params["worker"]
    log = tmp_path / "worker.log"
    client = tenure.SyncClient(dsn)
    try:
        # Between jobs: two jobs held until both run, so each pool thread holds a connection.
        batch = tmp_path / "batch"
        batch.mkdir()
        held = [
            client.enqueue("probe.held", {"folder": str(batch), "until": 2}, queue="probe").id
            for _ in range(2)
        ]
        done = [finished(client, job_id, worker, log) for job_id in held]
        assert [job.state.value for job in done] == ["succeeded", "succeeded"], done
        first = sorted(job.result for job in done)
        assert len(set(first)) == 2, "the two held jobs ran on one connection"
        if config == "conn_max_age_0":
            assert alive(dsn, first) == [], "CONN_MAX_AGE=0: a job's connection outlived the job"
        else:
            assert alive(dsn, first) == first, "a kept connection was closed between jobs"
        for pid in alive(dsn, first):
            terminate(dsn, pid)

        after = [
            client.enqueue("probe.orm", {"email": f"after-{n}@example.com"}, queue="probe").id
            for n in range(4)
        ]
        ran = [finished(client, job_id, worker, log) for job_id in after]
        assert [job.state.value for job in ran] == ["succeeded"] * 4, [job.last_error for job in ran]
        assert not set(job.result for job in ran) & set(first), "a job ran on a terminated connection"
        # With neither CONN_MAX_AGE nor a health check, Django learns of a dead kept connection only
        # from a failed query: a thread's first job after the kill spends one attempt on it.
        most = 2 if config == "persistent_no_health_checks" else 1
        assert all(job.attempt_count <= most for job in ran), [(j.attempt_count, j.last_error) for j in ran]
        assert all(orders(dsn, f"after-{n}@example.com") == 1 for n in range(4))

        # In the middle of a job: its connection is terminated while its handler runs.
        middle = tmp_path / "middle"
        middle.mkdir()
        interrupted = client.enqueue(
            "probe.killed_mid_run", {"folder": str(middle), "email": "middle@example.com"}, queue="probe"
        ).id
        killed = int(wait_for_file(middle / "pid", worker, log))
        terminate(dsn, killed)
        (middle / "killed").touch()
        job = finished(client, interrupted, worker, log)
        assert (job.state.value, job.attempt_count) == ("succeeded", 2), job.last_error
        assert job.result != killed
        failures = [e for e in client.job_history(interrupted) if e.error]
        assert len(failures) == 1 and "OperationalError" in str(failures[0].error), failures
        assert orders(dsn, "middle@example.com") == 1

        later = [
            client.enqueue("probe.orm", {"email": f"later-{n}@example.com"}, queue="probe").id
            for n in range(2)
        ]
        ran = [finished(client, job_id, worker, log) for job_id in later]
        assert [(job.state.value, job.attempt_count) for job in ran] == [("succeeded", 1)] * 2
    finally:
        client.close()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0, log.read_text()
