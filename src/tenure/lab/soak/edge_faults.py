"""The soak's faults at the edges Tenure guards: a foreign session holding pending rows of a
limited queue and of an ordering key, rows with the worst values the database still accepts, a
schema upgrade under load, and forged requests to the dashboard.

Each keeps what it did and judges it at the end (`checks`), from the database where it can.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from tenure import Client, TenureError
from tenure.db.connect import connect
from tenure.db.migrate import WORKER_SCHEMA_FLOOR, known_versions, latest_version, migrate, schema_version
from tenure.lab.soak.app import LIMITED_QUEUE, Kind, app
from tenure.lab.soak.app import QUEUE as SOAK_QUEUE
from tenure.lab.soak.queries import SoakQueries
from tenure.lab.soak.report import Check
from tenure.lab.soak.scope import FaultScope

#: The burst each pending-locks turn enqueues: more limited jobs than the limit lets run at once,
#: so some wait pending, and a key of its own whose later jobs wait behind its head.
BURST_LIMITED = 8
BURST_ORDERED = 4
#: How many of the limited queue's next jobs the foreign session holds.
HELD_LIMITED = 2

#: Leases' worth of seconds a hold may go on waiting for its queues to move.
HOLD_PATIENCE = 6.0

#: A run time just inside the database's bound (0015: before the year 9000).
FAR_RUN_AT = datetime(8999, 12, 31, tzinfo=UTC)
#: A unique key far past the length at which enqueue() keeps a digest of it instead.
LONG_KEY = 5000
#: Deeper than Python's JSON decoder recurses, shallower than PostgreSQL's jsonb limit.
UNREADABLE_DEPTH = 5000

#: Seconds after the upgrade's end within which jobs must have gone on completing.
AFTER_UPGRADE = 5.0
#: Seconds the upgrade waits for the first completion: it runs under load, not before the
#: workers are up (on a busy machine they take seconds to start).
LOAD_PATIENCE = 60.0

EVIL_HOST = "evil.example"
EVIL_ORIGIN = f"http://{EVIL_HOST}"


class PendingLocks:
    """Another session (an operator's `SELECT ... FOR UPDATE`, a report) holds the row locks of
    jobs still waiting: the limited queue's next jobs, in its claim's order, and the first waiting
    job of an ordering key. The claims must pass them by: the rest of both queues, and the
    limited queue's other jobs, go on completing meanwhile; the held jobs run once released."""

    def __init__(self, scope: FaultScope, acked: dict[str, list[int]]) -> None:
        self.scope = scope
        self.acked = acked
        self.queries = SoakQueries(scope.schema)
        self.holds: list[dict[str, Any]] = []
        self._turns = 0

    async def _burst(self, key: str) -> bool:
        """Enqueues the turn's jobs as the producer does; they are the workload's, counted with it."""
        async with Client(self.scope.dsn, schema=self.scope.schema, registry=app.registry) as client:
            limited = [
                client.builder.spec(Kind.LIMITED.value, {"seconds": round(self.scope.lease / 4, 3)})
                for _ in range(BURST_LIMITED)
            ]
            ordered = [
                client.builder.spec(Kind.ORDERED.value, {"key": key}, ordering_key=key)
                for _ in range(BURST_ORDERED)
            ]
            try:
                jobs = await client.enqueue_many(limited + ordered)
            except (TenureError, OSError):
                return False  # not acknowledged: neither enqueued nor lost, as for the producer
        self.acked[Kind.LIMITED.value] += [j.id for j in jobs[:BURST_LIMITED]]
        self.acked[Kind.ORDERED.value] += [j.id for j in jobs[BURST_LIMITED:]]
        return True

    async def inject(self) -> tuple[str, str, bool]:
        self._turns += 1
        key = f"held-{self._turns}"
        if not await self._burst(key):
            return "jobs", "the burst to hold could not be enqueued", True
        lease = self.scope.lease
        seconds = 2.0 * lease
        async with await connect(self.scope.dsn, autocommit=False) as conn:
            limited = await self.queries.lock_pending_limited(conn, LIMITED_QUEUE, HELD_LIMITED)
            keyed = await self.queries.lock_pending_keyed(conn, key)
            if not limited or not keyed:
                await conn.rollback()
                return "jobs", f"no pending row to hold (limited {limited}, key {key} {keyed})", True
            await asyncio.sleep(seconds)
            window = await self.queries.hold_window(conn, LIMITED_QUEUE, limited + keyed)
            # The queue's slots may all be taken by a stopped or killed worker's leases from the
            # fault before: hold on (the check asks for progress while held, not by a deadline)
            # until both queues have moved, or long past any lease.
            deadline = time.monotonic() + HOLD_PATIENCE * lease
            while not (window["limited"] and window["elsewhere"]) and time.monotonic() < deadline:
                await asyncio.sleep(lease / 4)
                window = await self.queries.hold_window(conn, LIMITED_QUEUE, limited + keyed)
            await conn.rollback()
        held_for = (window["ended"] - window["began"]).total_seconds()
        hold = {
            "limited_held": limited,
            "keyed_held": keyed,
            "key": key,
            "seconds": round(held_for, 2),
            "completed_limited": int(window["limited"]),
            "completed_elsewhere": int(window["elsewhere"]),
            "completed_ordered": int(window["ordered"]),
        }
        self.holds.append(hold)
        return (
            "session",
            f"held limited {limited} and {key}'s {keyed} for {held_for:.1f}s; completed meanwhile: "
            f"{hold['completed_limited']} of {LIMITED_QUEUE}, {hold['completed_elsewhere']} of "
            f"{SOAK_QUEUE} ({hold['completed_ordered']} ordered)",
            False,
        )

    def checks(self) -> list[Check]:
        stalled = [h for h in self.holds if not (h["completed_limited"] and h["completed_elsewhere"])]
        figures = "; ".join(
            f"{h['seconds']}s: {h['completed_limited']} limited, {h['completed_elsewhere']} {SOAK_QUEUE}"
            for h in self.holds
        )
        return [
            Check(
                "pending rows locked elsewhere held back only themselves (their queues went on)",
                bool(self.holds) and not stalled,
                f"{len(self.holds)} holds, completions during each: {figures or 'none'}",
            )
        ]


class BadRows:
    """The worst rows the database accepts. As the producer role, through enqueue(), its only
    way in: a job due in the year 8999 and one due now, each with priority 32767, 1000 attempts
    and a unique key thousands of characters long. As the admin, past every client check, a job
    whose payload is nested deeper than Python can decode. Each must cost only itself: the
    unreadable one ends dead with UNREADABLE_ROW, the far one waits, the one due now runs, and
    the workers go on working.

    The rows are not the workload's (their task is Kind.INJECTED): the workload's accounting leaves
    them out, and this fault judges each by its id."""

    def __init__(self, scope: FaultScope) -> None:
        self.scope = scope
        self.queries = SoakQueries(scope.schema)
        #: Injected row ids by what they are: "far", "now", "deep".
        self.rows: dict[str, list[int]] = {"far": [], "now": [], "deep": []}
        #: The dashboard's answer on each injected row's job page.
        self.pages: dict[int, str] = {}

    async def inject(self) -> tuple[str, str, bool]:
        producer, dsn = self.scope.producer, self.scope.dsn
        if producer is None:
            return "rows", "no producer role to enqueue as", True
        async with await connect(dsn) as conn:
            if await schema_version(conn, self.scope.schema) != latest_version():
                return "rows", "enqueue() comes with the upgrade, which has not run yet", True
        turn = len(self.rows["far"]) + 1
        worst: dict[str, Any] = {}
        async with await connect(producer.dsn(dsn)) as conn:
            for what, run_at, note in (
                ("far", FAR_RUN_AT, "due in the year 8999"),
                ("now", None, "due now, ahead of everything"),
            ):
                unique_key = f"{what}-{turn}-" + "k" * LONG_KEY
                payload = json.dumps({"note": note})
                worst[what] = await self.queries.enqueue_worst(
                    conn, queue=SOAK_QUEUE, run_at=run_at, unique_key=unique_key, payload=payload
                )
        far, now = worst["far"], worst["now"]
        async with await connect(dsn) as conn:
            deep = await self.queries.insert_unreadable(conn, SOAK_QUEUE, UNREADABLE_DEPTH)
        self.rows["far"].append(far["id"])
        self.rows["now"].append(now["id"])
        self.rows["deep"].append(deep)
        if self.scope.operator is not None:
            # The random reads of job pages leave it alone: this fault reads it itself, once.
            self.scope.operator.avoid.add(deep)
        ended = await self._wait_for(now["id"], deep)
        if self.scope.operator is not None:
            for job in (far["id"], now["id"], deep):
                self.pages[job] = await self.scope.operator.probe("GET", f"/jobs/{job}")
        pages = ", ".join(f"{job} {self.pages.get(job, '-')}" for job in (far["id"], now["id"], deep))
        return (
            "rows",
            f"far {far['id']} (scheduled {far['scheduled']}), now {now['id']} {ended.get(now['id'])}, "
            f"unreadable {deep} {ended.get(deep)}; job pages: {pages}",
            False,
        )

    async def _wait_for(self, now: int, deep: int) -> dict[int, str]:
        """Waits up to three leases for the row due now to succeed and the unreadable one to be
        set aside: how each stood at the end (the final check reads them again after the drain)."""
        deadline = time.monotonic() + 3 * self.scope.lease
        seen: dict[int, str] = {}
        async with await connect(self.scope.dsn) as conn:
            while True:
                rows = await self.queries.injected(conn, [now, deep])
                seen = {r["id"]: f"{r['state']} {r['code']}".strip() for r in rows}
                if (seen.get(now) == "succeeded" and seen.get(deep, "").startswith("dead")) or (
                    time.monotonic() > deadline
                ):
                    return seen
                await asyncio.sleep(0.2)

    async def checks(self, conn: Any) -> list[Check]:
        ids = [i for ids in self.rows.values() for i in ids]
        found = {r["id"]: r for r in await self.queries.injected(conn, ids)} if ids else {}
        wrong: list[str] = []
        for what, ids_of in self.rows.items():
            for job in ids_of:
                row = found.get(job)
                if row is None:
                    wrong.append(f"{what} {job} missing")
                elif not _ended_right(what, row):
                    wrong.append(f"{what} {job} {row['state']} {row['code']} (run year {row['run_year']})")
        counts = ", ".join(f"{len(v)} {k}" for k, v in self.rows.items())
        sample = next((found[i] for i in self.rows["far"] if i in found), None)
        stored = (
            f"; stored with priority {sample['priority']}, {sample['max_attempts']} attempts, and "
            f"the {LONG_KEY}-character unique key as its {sample['key_length']}-character digest"
            if sample
            else ""
        )
        broken_pages = {job: answer for job, answer in self.pages.items() if answer != "200"}
        return [
            Check(
                "rows with the worst values the database accepts cost only themselves",
                all(self.rows.values()) and not wrong,
                "; ".join(wrong[:4])
                or f"{counts}: unreadable ones dead with UNREADABLE_ROW, far ones scheduled for 8999, "
                f"the ones due now succeeded{stored}",
            ),
            Check(
                "the dashboard shows the job page of every injected row",
                bool(self.pages) and not broken_pages,
                "; ".join(f"/jobs/{job}: {answer}" for job, answer in list(broken_pages.items())[:3])
                or f"{len(self.pages)} pages",
            ),
        ]


def _ended_right(what: str, row: dict[str, Any]) -> bool:
    if what == "deep":
        return bool(row["state"] == "dead" and row["code"] == "UNREADABLE_ROW")
    if what == "far":
        return bool(
            row["state"] == "scheduled"
            and row["run_year"] == FAR_RUN_AT.year
            and row["priority"] == 32767
            and row["max_attempts"] == 1000
        )
    return bool(row["state"] == "succeeded")


class SchemaUpgrade:
    """The soak's schema starts at the oldest version workers run on (WORKER_SCHEMA_FLOOR); this
    fault migrates it to the latest while workers and producers run, once, then grants the roles
    what the new versions let them have. Its later turns would find nothing to do: it leaves the
    rotation once it ran (FaultSchedule.ONE_SHOT)."""

    def __init__(self, scope: FaultScope) -> None:
        self.scope = scope
        self.queries = SoakQueries(scope.schema)
        #: Set once the schema is at the latest version: the dashboard needs it.
        self.current = asyncio.Event()
        self.result: dict[str, Any] = {}
        #: When the migration began and ended (this host's clock, which the database shares).
        self.span: tuple[datetime, datetime] | None = None

    async def inject(self) -> tuple[str, str, bool]:
        schema, roles = self.scope.schema, self.scope.roles
        async with await connect(self.scope.dsn) as conn:
            before = await schema_version(conn, schema)
            if before == latest_version():
                self.current.set()
                return "schema", f"already at version {before}: nothing to upgrade", True
            if not await self._load_flowing(conn):
                return "schema", f"no job completed in {LOAD_PATIENCE:g}s: no load to upgrade under", True
            started, began = time.monotonic(), datetime.now(UTC)
            try:
                report = await migrate(conn, schema)
            except TenureError as exc:
                self.result = {"from": before, "failed": str(exc)[:300]}
                return "schema", f"the upgrade from version {before} failed: {exc}"[:300], False
            seconds = time.monotonic() - started
            self.span = (began, datetime.now(UTC))
            waiting = sum(len(role.waiting) for role in roles)
            for role in roles:
                await role.grant(conn)
        self.result = {
            "from": before,
            "to": report.current,
            "applied": report.applied,
            "expected": [v for v in known_versions() if before is None or v > before],
            "seconds": round(seconds, 2),
            "grants_completed": waiting,
        }
        self.current.set()
        return (
            "schema",
            f"version {before} -> {report.current} in {seconds:.2f}s, applied {report.applied}; "
            f"{waiting} role GRANTs that waited for it applied",
            False,
        )

    async def _load_flowing(self, conn: Any) -> bool:
        deadline = time.monotonic() + LOAD_PATIENCE
        while not await self.queries.any_succeeded(conn):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.2)
        return True

    async def checks(self, conn: Any) -> list[Check]:
        r = self.result
        applied = (
            r.get("from") == WORKER_SCHEMA_FLOOR
            and r.get("to") == latest_version()
            and r.get("applied") == r.get("expected")
            and bool(r.get("applied"))
        )
        went_on = await self._work_around(conn)
        return [
            Check(
                "the schema was upgraded under load, every remaining version applied",
                applied,
                r.get("failed")
                or (
                    f"{r['from']} -> {r['to']}: applied {r['applied']} in {r['seconds']}s"
                    if r
                    else "the upgrade never ran"
                ),
            ),
            Check(
                "jobs went on completing through the upgrade",
                went_on.get("completed", 0) > 0,
                ", ".join(f"{k} {v}" for k, v in went_on.items()) or "the upgrade never ran",
            ),
        ]

    async def _work_around(self, conn: Any) -> dict[str, Any]:
        """Completions from the upgrade's start until AFTER_UPGRADE seconds past its end: how
        many, and the longest stretch without one from its start to the last of them."""
        if self.span is None:
            return {}
        began, ended = self.span
        times = await self.queries.completions_between(conn, began, ended + timedelta(seconds=AFTER_UPGRADE))
        found: dict[str, Any] = {"completed": len(times)}
        if times:
            gap = max((b - a).total_seconds() for a, b in itertools.pairwise([began, *times]))
            found["longest_gap_s"] = round(gap, 2)
        self.result.update(found)
        return found


class ForgedRequests:
    """A web page that points its own DNS name at the dashboard's address (DNS rebinding) makes
    the browser send that name as the Host; another site's page can post a form to it (the
    browser sends its Origin). Each request is made with the dashboard's own CSRF token, so only
    the Host and Origin checks stand in its way: each must be refused (400 for the host, 403 for
    the origin), and the job and queue it aimed at must carry no record of an act."""

    def __init__(self, scope: FaultScope) -> None:
        self.scope = scope
        self.queries = SoakQueries(scope.schema)
        self.trials: list[dict[str, Any]] = []

    async def inject(self) -> tuple[str, str, bool]:
        if self.scope.operator is None:
            return "dashboard", "no dashboard", True
        async with await connect(self.scope.dsn) as conn:
            running = await self.queries.running_sample(conn, limit=10)
            if not running:
                return "dashboard", "no running job to aim at", True
            job = int(running[0]["id"])
            before = await self.queries.acts_recorded(conn, job, SOAK_QUEUE)
        forged = (
            ("GET", f"/jobs/{job}", {"host": EVIL_HOST}, "400"),
            ("POST", f"/jobs/{job}/cancel", {"host": EVIL_HOST}, "400"),
            ("POST", f"/queues/{SOAK_QUEUE}/pause", {"host": EVIL_HOST}, "400"),
            ("POST", f"/jobs/{job}/cancel", {"origin": EVIL_ORIGIN}, "403"),
            ("POST", f"/queues/{SOAK_QUEUE}/pause", {"origin": EVIL_ORIGIN}, "403"),
        )
        answers = []
        for method, path, headers, wanted in forged:
            answer = await self.scope.operator.probe(method, path, headers=headers, reason="soak: forged")
            answers.append((method, path, next(iter(headers)), answer, wanted))
        async with await connect(self.scope.dsn) as conn:
            after = await self.queries.acts_recorded(conn, job, SOAK_QUEUE)
        changed = [
            what
            for what, differs in (
                ("the job has a new cancel or revoke record", after["job_acts"] != before["job_acts"]),
                ("the job is cancelled", after["job_state"] == "cancelled"),
                ("the queue has a new pause record", after["queue_acts"] != before["queue_acts"]),
                ("the queue is paused", bool(after["paused"])),
            )
            if differs
        ]
        self.trials.append({"job": job, "answers": answers, "changed": changed})
        said = ", ".join(f"{m} {p} ({h}) {a}" for m, p, h, a, _ in answers)
        return "dashboard", f"{said}; " + ("; ".join(changed) or "nothing changed"), False

    def checks(self) -> list[Check]:
        wrong = [
            f"{m} {p} with a forged {h}: {a}, not {w}"
            for t in self.trials
            for m, p, h, a, w in t["answers"]
            if a != w
        ]
        changed = [f"job {t['job']}: {c}" for t in self.trials for c in t["changed"]]
        requests = sum(len(t["answers"]) for t in self.trials)
        return [
            Check(
                "forged Host and Origin requests to the dashboard were refused and changed nothing",
                bool(self.trials) and not wrong and not changed,
                "; ".join((wrong + changed)[:4]) or f"{requests} requests refused, no act recorded",
            )
        ]
