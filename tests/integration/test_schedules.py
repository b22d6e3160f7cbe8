"""Periodic jobs against real PostgreSQL: schedulers racing over one schedule fire each slot
once, missed slots follow their policy after a gap, a paused schedule fires nothing, a schedule
no worker declares any more stops. Time is injected through the query layer (`now=`)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row

import tenure
from tenure.db.pool import open_pool
from tenure.db.queries import Queries
from tenure.db.schedule_queries import ScheduleQueries, ScheduleResume
from tenure.model.schedules import slot_key
from tenure.worker.options import WorkerOptions
from tenure.worker.scheduler import Scheduler
from tenure.worker.services import WorkerServices

SCHEMA = "tenure"
T0 = datetime(2030, 1, 1, 12, 0, 0, 200000, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def minute(m: int) -> datetime:
    """12:mm:00 on T0's day."""
    return T0.replace(minute=m, second=0, microsecond=0)


async def rows(db: AsyncConnection[Any], query: str, params: Any = None) -> list[dict[str, Any]]:
    async with db.cursor(row_factory=dict_row) as cur:
        await cur.execute(query, params)
        return await cur.fetchall()


async def fired_slots(db: AsyncConnection[Any], schedule: str) -> list[datetime]:
    found = await rows(
        db, "SELECT slot FROM tenure.schedule_fires WHERE schedule = %s ORDER BY slot", [schedule]
    )
    return [r["slot"] for r in found]


def make_app(dsn: str, *declarations: tuple[str, str, Any]) -> tenure.Tenure:
    """An app with one task, `cron.tick`, scheduled as each (name, cron, missed) says."""
    app = tenure.Tenure(dsn)

    @app.task(name="cron.tick", queue="cron")
    def tick(ctx: tenure.JobContext, kind: str = "plain") -> None:
        pass

    for name, cron, missed in declarations:
        app.schedule(tick, cron, name=name, payload={"kind": name}, missed=missed)
    return app


@contextlib.asynccontextmanager
async def scheduler(
    dsn: str, app: tenure.Tenure, worker_id: str, *, grace: float = 5.0, dsn_as: str | None = None
) -> AsyncIterator[Scheduler]:
    """A scheduler of `app` on its own pool, as one worker process would run it."""
    pool = await open_pool(dsn_as or dsn, min_size=1, max_size=2)
    services = WorkerServices(
        pool=pool, queries=Queries(SCHEMA), options=WorkerOptions(worker_id=worker_id), dsn=dsn_as or dsn
    )
    try:
        yield Scheduler(services, list(app.registry.schedules.values()), grace=grace)
    finally:
        await services.close()
        await pool.close()


async def test_racing_schedulers_fire_each_slot_exactly_once(dsn: str, db: AsyncConnection[Any]) -> None:
    """Two schedulers tick an every-second schedule at the same and at interleaved instants for 30
    simulated seconds, racing on some slots and taking turns on others: every slot after
    registration is one job (keyed by uuid5 of its slot, due at its slot) and one history row;
    none is missing, none doubled, and both won some."""
    app = make_app(dsn, ("race", "* * * * * *", "latest"))
    async with scheduler(dsn, app, "sched-a") as a, scheduler(dsn, app, "sched-b") as b:
        await asyncio.gather(a.register(now=T0), b.register(now=T0))
        wins = {"sched-a": 0, "sched-b": 0}
        for step in range(1, 61):
            now = at(step * 0.5)
            later = now + timedelta(milliseconds=step % 3)
            # Who wins a true race is up to the operating system's scheduling, so every third
            # step races and the others give each side a turn first: both must win some.
            if step % 6 == 2:
                ticks = [await a.run_once(now=now), await b.run_once(now=later)]
            elif step % 6 == 0:
                tick_b = await b.run_once(now=later)
                ticks = [await a.run_once(now=now), tick_b]
            else:
                ticks = list(await asyncio.gather(a.run_once(now=now), b.run_once(now=later)))
            for who, tick in zip(("sched-a", "sched-b"), ticks, strict=True):
                wins[who] += len(tick.fired.get("race", []))
    expected = [T0.replace(microsecond=0) + timedelta(seconds=s) for s in range(1, 31)]
    assert await fired_slots(db, "race") == expected
    jobs = await rows(
        db,
        "SELECT available_at, idempotency_key, state::text, queue, task, payload FROM tenure.jobs "
        "ORDER BY available_at",
    )
    assert [j["available_at"] for j in jobs] == expected
    assert {(j["state"], j["queue"], j["task"], j["payload"]["kind"]) for j in jobs} == {
        ("pending", "cron", "cron.tick", "race")
    }
    [namespace] = await rows(db, "SELECT key_namespace FROM tenure.schedules WHERE name = 'race'")
    assert [j["idempotency_key"] for j in jobs] == [
        slot_key(namespace["key_namespace"], SCHEMA, "race", slot) for slot in expected
    ]
    assert sum(wins.values()) == 30 and min(wins.values()) > 0, wins


async def test_a_stale_plan_writes_nothing(dsn: str, db: AsyncConnection[Any]) -> None:
    """A scheduler that planned from a last slot another scheduler has since fired past, or from
    before a pause, inserts no job and moves nothing: the fire's guard on the locked row holds."""
    app = make_app(dsn, ("stale", "* * * * * *", "latest"))
    sq = ScheduleQueries(SCHEMA)
    async with scheduler(dsn, app, "fast") as fast:
        await fast.register(now=T0)
        _, [seen] = await sq.state(db, ["stale"], now=at(3))
        slots = [at(s).replace(microsecond=0) for s in (1, 2, 3)]
        assert (await fast.run_once(now=at(3))).fired == {"stale": slots}
        late = await sq.fire(
            db,
            name="stale",
            seen_last_slot=seen.last_slot,
            cron=seen.cron,
            timezone=seen.timezone,
            slots=slots,
            keys=[slot_key(seen.key_namespace, SCHEMA, "stale", s) for s in slots],
            advance_to=slots[-1],
            worker="slow",
            now=at(3.5),
        )
        assert not late.won and late.slots == [] and late.job_ids == []
        _, [before_pause] = await sq.state(db, ["stale"], now=at(5))
        paused = await sq.pause(db, "stale", actor="ops", reason="maintenance", now=at(5))
        assert paused is not None and paused.outcome == "paused"
        paused = await sq.fire(
            db,
            name="stale",
            seen_last_slot=before_pause.last_slot,
            cron=before_pause.cron,
            timezone=before_pause.timezone,
            slots=[at(4).replace(microsecond=0)],
            keys=[slot_key(before_pause.key_namespace, SCHEMA, "stale", at(4).replace(microsecond=0))],
            advance_to=at(5).replace(microsecond=0),
            worker="slow",
            now=at(5),
        )
        assert not paused.won
    assert await fired_slots(db, "stale") == slots
    assert (await rows(db, "SELECT count(*) AS n FROM tenure.jobs"))[0]["n"] == 3


async def test_missed_slots_after_a_gap_follow_each_schedules_policy(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Every-minute schedules registered at 12:00:00.2 fire nothing for 12:00 (a new schedule starts
    now); after ten minutes with no scheduler, at 12:10:01: skip fires only the on-time 12:10,
    latest 12:09 and 12:10, backfill:3 12:07 to 12:10; then each fires 12:11 once, on time."""
    app = make_app(
        dsn,
        ("gap.skip", "* * * * *", "skip"),
        ("gap.latest", "* * * * *", "latest"),
        ("gap.backfill", "* * * * *", ("backfill", 3)),
    )
    async with scheduler(dsn, app, "only") as only:
        created = await only.register(now=T0)
        assert created == {"gap.backfill": True, "gap.latest": True, "gap.skip": True}
        assert (await only.run_once(now=at(30))).fired == {}
        tick = await only.run_once(now=minute(10) + timedelta(seconds=1))
        assert tick.fired == {
            "gap.skip": [minute(10)],
            "gap.latest": [minute(9), minute(10)],
            "gap.backfill": [minute(7), minute(8), minute(9), minute(10)],
        }
        assert tick.next_due == minute(11)
        assert (await only.run_once(now=minute(10) + timedelta(seconds=30))).fired == {}
        later = await only.run_once(now=minute(11) + timedelta(milliseconds=300))
        assert later.fired == {name: [minute(11)] for name in ("gap.skip", "gap.latest", "gap.backfill")}
        assert await only.register(now=minute(12)) == dict.fromkeys(created, False)
    assert await fired_slots(db, "gap.backfill") == [minute(m) for m in (7, 8, 9, 10, 11)]
    [row] = await rows(db, "SELECT last_slot, last_fired_slot FROM tenure.schedules WHERE name = 'gap.skip'")
    assert row == {"last_slot": minute(11), "last_fired_slot": minute(11)}


async def test_a_paused_schedule_fires_nothing_and_resuming_skips_what_fell_in_the_pause(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Paused at 12:00:10, a schedule fires nothing at 12:01-12:03 however often it is ticked; a
    second pause is refused and keeps the first; resumed at 12:03:10 it does not fire the slots
    of the pause, and fires 12:04 on time."""
    app = make_app(dsn, ("held", "* * * * *", ("backfill", 10)))
    sq = ScheduleQueries(SCHEMA)
    async with scheduler(dsn, app, "only") as only:
        await only.register(now=T0)
        paused = await sq.pause(db, "held", actor="ops", reason="supplier down", now=at(10))
        assert paused is not None and paused.outcome == "paused" and paused.pause_reason == "supplier down"
        again = await sq.pause(db, "held", actor="someone", reason="again", now=at(20))
        assert again is not None and (again.outcome, again.paused_by) == ("already", "ops")
        for m in (1, 2, 3):
            assert (await only.run_once(now=minute(m) + timedelta(seconds=1))).fired == {}
        resumed = await sq.resume(db, "held", now=minute(3) + timedelta(seconds=10))
        assert resumed == ScheduleResume("resumed", minute(3) + timedelta(seconds=10))
        assert await sq.resume(db, "held", now=minute(3) + timedelta(seconds=11)) == ScheduleResume(
            "not_paused", None
        )
        assert (await only.run_once(now=minute(3) + timedelta(seconds=20))).fired == {}
        assert (await only.run_once(now=minute(4) + timedelta(seconds=1))).fired == {"held": [minute(4)]}
    assert await sq.pause(db, "no.such", actor="ops", reason="x") is None
    assert await fired_slots(db, "held") == [minute(4)]


async def test_a_schedule_no_running_worker_declares_stops_and_keeps_its_history(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Version 1 of an app declares 'kept' and 'dropped'; version 2 only 'kept'. Once only version 2
    runs, 'dropped' fires no more, its declaration ages (what `tenure schedules list` flags) and its
    fired slots stay in the history."""
    v1 = make_app(dsn, ("kept", "* * * * *", "latest"), ("dropped", "* * * * *", "latest"))
    v2 = make_app(dsn, ("kept", "* * * * *", "latest"))
    async with scheduler(dsn, v1, "v1") as old:
        await old.register(now=T0)
        assert set((await old.run_once(now=minute(1) + timedelta(seconds=1))).fired) == {"kept", "dropped"}
    async with scheduler(dsn, v2, "v2") as new:
        await new.register(now=minute(1) + timedelta(seconds=2))
        for m in (2, 3, 4):
            assert set((await new.run_once(now=minute(m) + timedelta(seconds=1))).fired) == {"kept"}
    listed = {r.name: r for r in await ScheduleQueries(SCHEMA).list_all(db, now=minute(5))}
    assert listed["dropped"].undeclared_seconds == (minute(5) - T0).total_seconds()
    assert listed["kept"].undeclared_seconds < 240
    assert await fired_slots(db, "dropped") == [minute(1)]
    assert await fired_slots(db, "kept") == [minute(m) for m in (1, 2, 3, 4)]


async def test_a_worker_runs_its_apps_schedule_every_second(dsn: str, db: AsyncConnection[Any]) -> None:
    """An in-process worker whose app declares an every-second schedule registers it, fires each
    slot on time by the database clock, and runs every fired job to success."""
    app = tenure.Tenure(dsn)
    ran: list[int] = []

    @app.periodic("* * * * * *", name="heartbeat.every_second", queue="cron")
    async def beat(ctx: tenure.JobContext) -> None:
        ran.append(ctx.job_id)

    worker = app.worker(WorkerOptions(poll_interval=0.2, shutdown_grace=2))
    task = asyncio.create_task(worker.run())
    try:
        for _ in range(100):
            if len(ran) >= 3:
                break
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)
        await app.close()
    assert len(ran) >= 3, ran
    lateness = await rows(
        db,
        "SELECT f.slot, j.state::text AS state, extract(epoch FROM f.fired_at - f.slot)::float8 AS late "
        "FROM tenure.schedule_fires f JOIN tenure.jobs j ON j.id = f.job_id ORDER BY f.slot",
    )
    assert {r["state"] for r in lateness[:3]} == {"succeeded"}
    assert max(r["late"] for r in lateness) < 0.5, lateness
    slots = [r["slot"] for r in lateness]
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(slots)), slots


async def test_the_worker_role_runs_the_scheduler_but_may_not_pause(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """Under the worker role's GRANTs a scheduler registers and fires its schedules; pausing,
    resuming, rewriting a key namespace or deleting history are refused."""
    from tenure.security.roles import Role, grants

    role = f"tenure_sched_{uuid.uuid4().hex[:8]}"
    await db.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        await db.execute(grants(Role.WORKER, role, SCHEMA))
        params = psycopg.conninfo.conninfo_to_dict(dsn)
        params["user"] = role
        as_worker = psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]
        app = make_app(dsn, ("granted", "* * * * * *", "latest"))
        async with scheduler(dsn, app, "w", dsn_as=as_worker) as sched:
            await sched.register(now=T0)
            assert len((await sched.run_once(now=at(2))).fired["granted"]) == 2
        async with await AsyncConnection.connect(as_worker, autocommit=True) as conn:
            sq = ScheduleQueries(SCHEMA)
            for refused in (
                sq.pause(conn, "granted", actor="w", reason="x"),
                conn.execute("UPDATE tenure.schedules SET key_namespace = gen_random_uuid()"),
                conn.execute("DELETE FROM tenure.schedule_fires"),
                conn.execute("DELETE FROM tenure.schedules"),
            ):
                try:
                    await refused
                except psycopg.errors.InsufficientPrivilege:
                    continue
                raise AssertionError("the worker role was allowed an operator's act")
    finally:
        await db.execute(f'DROP OWNED BY "{role}"')
        await db.execute(f'DROP ROLE "{role}"')
    assert len(await fired_slots(db, "granted")) == 2


async def test_retention_prunes_old_fired_slots_but_the_schedule_keeps_its_last_fire(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """The retention pass deletes fired-slot history older than the audit retention and keeps the
    newer rows; the schedule's row still shows its last fired slot."""
    from tenure.worker.maintenance import RetentionPolicy, prune

    app = make_app(dsn, ("pruned", "* * * * *", "latest"))
    async with scheduler(dsn, app, "only") as only:
        await only.register(now=T0)
        for m in (1, 2, 3):
            await only.run_once(now=minute(m) + timedelta(seconds=1))
    pool = await open_pool(dsn, max_size=2)
    try:
        policy = RetentionPolicy(audit_seconds=90)
        report = await prune(pool, SCHEMA, policy, now=minute(3) + timedelta(seconds=30))
    finally:
        await pool.close()
    assert report.schedule_fires == 1
    assert await fired_slots(db, "pruned") == [minute(2), minute(3)]
    [row] = await rows(db, "SELECT last_fired_slot FROM tenure.schedules WHERE name = 'pruned'")
    assert row["last_fired_slot"] == minute(3)


async def test_the_database_gauges_count_schedules_and_their_last_fire_age(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A scrape counts active, paused and undeclared schedules and shows, per schedule that has
    fired, the seconds since its last fired slot."""
    from tenure.ops.metrics.database import DatabaseCollector

    app = make_app(
        dsn,
        ("m.fires", "* * * * * *", "latest"),
        ("m.held", "* * * * * *", "latest"),
        ("m.gone", "0 0 1 1 *", "skip"),
    )
    async with scheduler(dsn, app, "only") as only:
        await only.register()
        await ScheduleQueries(SCHEMA).pause(db, "m.held", actor="ops", reason="metrics")
        await db.execute(
            "UPDATE tenure.schedules SET declared_at = now() - interval '1 hour' WHERE name = 'm.gone'"
        )
        await asyncio.sleep(1.1)
        assert "m.fires" in (await only.run_once()).fired
    collector = DatabaseCollector(dsn)
    try:
        families = {f.name: f for f in await asyncio.to_thread(lambda: list(collector.collect()))}
    finally:
        collector.close()
    states = {s.labels["state"]: s.value for s in families["tenure_schedules"].samples}
    assert states == {"active": 1.0, "paused": 1.0, "undeclared": 1.0}
    [age] = families["tenure_schedule_last_fire_age_seconds"].samples
    assert age.labels == {"schedule": "m.fires"} and 0 <= age.value < 5


async def test_a_schedule_this_worker_cannot_read_does_not_stop_the_others(
    dsn: str, db: AsyncConnection[Any]
) -> None:
    """A schedule whose row holds a cron this worker's cronsim refuses (written by another version
    of the app) is left alone with a warning; the worker's other schedules fire as usual."""
    app = make_app(dsn, ("readable", "* * * * *", "latest"), ("unreadable", "* * * * *", "latest"))
    async with scheduler(dsn, app, "only") as only:
        await only.register(now=T0)
        await db.execute("UPDATE tenure.schedules SET cron = '* * * * * * *' WHERE name = 'unreadable'")
        tick = await only.run_once(now=minute(1) + timedelta(seconds=1))
    assert tick.fired == {"readable": [minute(1)]}
    assert await fired_slots(db, "unreadable") == []
