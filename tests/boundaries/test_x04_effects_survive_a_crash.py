"""X4: a worker process is SIGKILLed after its external call and before the job completed. The retry
reaches an idempotent destination with the same key, which does not repeat the effect; through the
effect ledger, a destination without idempotency ends 'uncertain' and is reconciled (by the app's
hook, or by an operator), never silently called again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import psycopg
import pytest
from _harness import TESTS_DIR, WorkerProcess, job_row, rows, wait_for_marker, wait_until

from tenure.db.queries import Queries
from tenure.model.jobs import JobSpec

LEASE = 1.0


@dataclass
class Destination:
    """The outside world: `/charge` deduplicates by Idempotency-Key, `/send` does not."""

    charge_keys: list[str] = field(default_factory=list)
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    sends: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, method: str, path: str, headers: Any, body: Any) -> Any:
        url = urlparse(path)
        with self.lock:
            if url.path == "/charge":
                key = headers["Idempotency-Key"]
                self.charge_keys.append(key)
                if key not in self.charges:  # the effect happens once per key
                    self.charges[key] = {"charge": f"ch_{len(self.charges) + 1}", "amount": body["amount"]}
                return self.charges[key]
            if url.path == "/send":
                sent = {"message": f"msg_{len(self.sends) + 1}", "ref": body["ref"]}
                self.sends.append(sent)  # every call is a new effect
                return sent
            if url.path == "/lookup":
                ref = parse_qs(url.query)["ref"][0]
                return next((s for s in self.sends if s["ref"] == ref), None)
        raise KeyError(url.path)


@pytest.fixture
def destination() -> Iterator[tuple[Destination, str]]:
    """An HTTP destination on 127.0.0.1, served from a thread for the test's duration."""
    state = Destination()

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            payload = json.dumps(state.handle(method, self.path, self.headers, body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._reply("GET")

        def do_POST(self) -> None:
            self._reply("POST")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def spawn_effects_worker(dsn: str, tmp_path: Path) -> Iterator[Any]:
    """`tenure worker apps.effects_app` processes on this test's database, killed at teardown."""
    procs: list[WorkerProcess] = []

    def spawn(worker_id: str) -> WorkerProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH")) if p)
        env.pop("TENURE_DSN", None)
        cmd = [sys.executable, "-m", "tenure.ops.cli", "-v", "worker", "apps.effects_app", "--dsn", dsn]
        cmd += ["--lease", str(LEASE), "--worker-id", worker_id, "--poll-interval", "0.2", "--json"]
        out_path, log_path = tmp_path / f"{worker_id}.out", tmp_path / f"{worker_id}.log"
        with out_path.open("wb") as out, log_path.open("wb") as log:
            popen = subprocess.Popen(cmd, stdout=out, stderr=log, env=env, cwd=str(TESTS_DIR))
        proc = WorkerProcess(worker_id, popen, out_path, log_path)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.cleanup()


async def settled(db: psycopg.AsyncConnection[Any], job_id: int) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        row = await job_row(db, job_id)
        return row if row["state"] in ("succeeded", "dead") else None

    return await wait_until(probe, timeout=30, what=f"job {job_id} to settle")


async def effects(db: psycopg.AsyncConnection[Any], job_id: int) -> list[dict[str, Any]]:
    return await rows(
        db,
        "SELECT id, name, state, token, outcome, resolved_by FROM tenure.job_effects WHERE job_id = %s",
        (job_id,),
    )


@pytest.mark.crash
@pytest.mark.slow
async def test_x04_idempotent_destination_sees_the_same_key_and_charges_once(
    db: psycopg.AsyncConnection[Any],
    queries: Queries,
    spawn_effects_worker: Any,
    destination: tuple[Destination, str],
    marker_dir: Path,
) -> None:
    """Killed after the charge: the retry sends the same Idempotency-Key, and the destination charges once."""
    state, url = destination
    worker_a = spawn_effects_worker("worker-a")
    payload = {"marker_dir": str(marker_dir), "url": url, "amount": 4200}
    [job] = await queries.job_insert_many(db, [JobSpec(task="x4.idempotent_charge", payload=payload)])
    await wait_for_marker(marker_dir, "called-1", timeout=30, procs=(worker_a,))
    assert len(state.charge_keys) == 1
    worker_a.crash()

    worker_b = spawn_effects_worker("worker-b")
    final = await settled(db, job.id)
    assert (final["state"], final["lease_token"]) == ("succeeded", 2)
    expected_key = str(uuid.uuid5(job.idempotency_key, "charge"))
    assert state.charge_keys == [expected_key, expected_key]  # the retry really called again...
    assert list(state.charges.values()) == [{"charge": "ch_1", "amount": 4200}]  # ...and nothing repeated
    worker_b.stop()


@pytest.mark.crash
@pytest.mark.slow
async def test_x04_ledger_effect_is_uncertain_after_the_crash_and_the_hook_reconciles_it(
    db: psycopg.AsyncConnection[Any],
    queries: Queries,
    spawn_effects_worker: Any,
    destination: tuple[Destination, str],
    marker_dir: Path,
) -> None:
    """Killed after a non-idempotent send: the retry finds the intent, asks the destination through
    the reconcile hook, records the confirmed outcome, and does not send again."""
    state, url = destination
    worker_a = spawn_effects_worker("worker-a")
    payload = {"marker_dir": str(marker_dir), "url": url, "reconcile": True}
    [job] = await queries.job_insert_many(db, [JobSpec(task="x4.ledger_send", payload=payload)])
    await wait_for_marker(marker_dir, "called-1", timeout=30, procs=(worker_a,))
    [intent] = await effects(db, job.id)
    assert (intent["state"], intent["token"]) == ("intent", 1)
    worker_a.crash()

    worker_b = spawn_effects_worker("worker-b")
    final = await settled(db, job.id)
    assert final["state"] == "succeeded"
    assert len(state.sends) == 1, state.sends
    [effect] = await effects(db, job.id)
    assert (effect["state"], effect["outcome"], effect["resolved_by"]) == ("done", state.sends[0], "worker-b")
    worker_b.stop()


@pytest.mark.crash
@pytest.mark.slow
async def test_x04_without_a_hook_the_effect_stays_uncertain_until_an_operator_resolves_it(
    db: psycopg.AsyncConnection[Any],
    queries: Queries,
    spawn_effects_worker: Any,
    destination: tuple[Destination, str],
    marker_dir: Path,
    dsn: str,
) -> None:
    """Killed after a non-idempotent send, with no hook: the job dies EFFECT_UNCERTAIN, the effect is
    listed as uncertain; confirmed by an operator and reprocessed, the job succeeds with no second send."""
    state, url = destination
    worker_a = spawn_effects_worker("worker-a")
    payload = {"marker_dir": str(marker_dir), "url": url, "reconcile": False}
    [job] = await queries.job_insert_many(db, [JobSpec(task="x4.ledger_send", payload=payload)])
    await wait_for_marker(marker_dir, "called-1", timeout=30, procs=(worker_a,))
    worker_a.crash()

    worker_b = spawn_effects_worker("worker-b")
    final = await settled(db, job.id)
    assert (final["state"], final["last_error_code"]) == ("dead", "EFFECT_UNCERTAIN")
    [effect] = await effects(db, job.id)
    assert effect["state"] == "uncertain"
    assert len(state.sends) == 1

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tenure.ops.cli", *args, "--dsn", dsn, "--json"]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    listed = cli("effects", "list", "--uncertain")
    assert listed.returncode == 0, listed.stderr
    assert [(e["id"], e["job_id"]) for e in json.loads(listed.stdout)] == [(effect["id"], job.id)]
    outcome = json.dumps(state.sends[0])
    resolved = cli(
        "effects", "resolve", str(effect["id"]), "--confirmed", "--outcome", outcome, "--reason", "seen"
    )
    assert resolved.returncode == 0, resolved.stderr
    reprocessed = cli("dead", "reprocess", str(job.id), "--reason", "effect confirmed")
    assert reprocessed.returncode == 0, reprocessed.stderr

    final = await settled(db, job.id)
    assert final["state"] == "succeeded"
    assert len(state.sends) == 1, "the confirmed effect must not be performed again"
    [effect] = await effects(db, job.id)
    assert (effect["state"], effect["outcome"]) == ("done", state.sends[0])
    worker_b.stop()
