"""X12: periodic jobs across real worker processes. Four `tenure worker` processes, two of
them with their wall clock skewed by libfaketime (30 s ahead, 20 s behind), all fire the same
every-second schedules with no leader: every slot fires exactly once, on time by the database's
clock. Then every worker stops, and the one restarted after the gap fires the missed slots as
each schedule's policy says."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _harness import rows, wait_until

from apps.cron_app import CLOCK_DIR_ENV
from tenure.lab.soak.fleet import FAKETIME_LIBRARY

CRON_APP = "apps.cron_app"
SCHEDULES = ("cron.backfill", "cron.latest", "cron.skip")
#: How many missed slots each schedule's policy runs after a gap.
KEEPS = {"cron.skip": 0, "cron.latest": 1, "cron.backfill": 3}
SKEWS = {"w3": "+30s", "w4": "-20s"}
WINDOW = 25.0  # seconds all four workers fire together
GAP = 7.0  # seconds no worker runs
#: The schedulers' on-time grace at the harness's --poll-interval 0.2: max(2 s, two intervals).
GRACE = 2.0
SECOND = timedelta(seconds=1)


def skewed(skew: str) -> dict[str, str]:
    # As the soak's fleet does: every clock of the process moves (monotonic ones too), by a
    # constant, so only the wall clock reads differ from the database's.
    return {"LD_PRELOAD": str(FAKETIME_LIBRARY), "FAKETIME": skew, "FAKETIME_NO_CACHE": "1"}


async def fires(db: psycopg.AsyncConnection[Any]) -> list[dict[str, Any]]:
    return await rows(
        db,
        "SELECT f.schedule, f.slot, f.job_id, f.worker, f.fired_at, j.task, j.available_at"
        " FROM tenure.schedule_fires f JOIN tenure.jobs j ON j.id = f.job_id ORDER BY f.schedule, f.slot",
    )


def contiguous(slots: list[datetime]) -> bool:
    return all(b - a == SECOND for a, b in itertools.pairwise(slots))


def clock_offsets(clock_dir: Path, pid: int, ran_at: dict[int, datetime]) -> list[float]:
    """Each job one worker ran: its wall clock minus the database's time of the claim."""
    path = clock_dir / f"{pid}.jsonl"
    if not path.exists():
        return []
    noted = [json.loads(line) for line in path.read_text().splitlines()]
    return [n["local"] - ran_at[n["job"]].timestamp() for n in noted if n["job"] in ran_at]


@pytest.mark.crash
@pytest.mark.slow
async def test_x12_every_slot_fires_once_across_skewed_workers_and_a_gap_follows_the_policy(
    db: psycopg.AsyncConnection[Any], spawn_worker: Any, tmp_path: Path
) -> None:
    """Four workers (two with skewed clocks) fire three every-second schedules for 25 s: each
    slot from the first fire on is exactly one job, none missing, none early, all within a
    second of their slot, fired by several workers. All stop for 7 s; the one restarted fires,
    in its first tick, the on-time slots plus none (skip), the latest (latest) or the 3 latest
    (backfill) of the missed ones, and nothing else of the gap."""
    assert FAKETIME_LIBRARY.exists(), "libfaketime is needed: run scripts/install-system-deps.sh"
    clock_dir = tmp_path / "clocks"
    clock_dir.mkdir()
    base_env = {CLOCK_DIR_ENV: str(clock_dir)}
    workers = {
        name: spawn_worker(
            name,
            lease=10.0,
            app=CRON_APP,
            env_extra={**base_env, **(skewed(SKEWS[name]) if name in SKEWS else {})},
        )
        for name in ("w1", "w2", "w3", "w4")
    }

    async def all_running() -> bool:
        for proc in workers.values():
            assert proc.popen.poll() is None, f"{proc.worker_id} exited:\n{proc.log()[-3000:]}"
        found = await rows(db, "SELECT count(*) AS n FROM tenure.workers")
        return bool(found[0]["n"] == len(workers))

    await wait_until(all_running, timeout=30, what="four registered workers")
    await asyncio.sleep(WINDOW)
    for proc in workers.values():
        proc.stop()

    before_gap = await fires(db)
    by_schedule = {name: [f for f in before_gap if f["schedule"] == name] for name in SCHEDULES}
    for name, fired in by_schedule.items():
        slots = [f["slot"] for f in fired]
        assert len(slots) >= WINDOW - 2, (name, len(slots))
        assert contiguous(slots), f"{name}: a slot was missed or doubled: {slots}"
        assert all(f["available_at"] == f["slot"] for f in fired)
        assert all(f["slot"] <= f["fired_at"] < f["slot"] + SECOND for f in fired), (
            name,
            max(f["fired_at"] - f["slot"] for f in fired),
        )
    doubled = await rows(
        db,
        "SELECT task, available_at, count(*) AS n FROM tenure.jobs GROUP BY 1, 2 HAVING count(*) > 1",
    )
    assert doubled == []
    assert (await rows(db, "SELECT count(*) AS n FROM tenure.jobs"))[0]["n"] == len(before_gap)
    firers = {f["worker"] for f in before_gap}
    print(
        f"\nslots fired by worker: { {w: sum(f['worker'] == w for f in before_gap) for w in sorted(firers)} }"
    )
    assert len(firers) >= 2, firers

    # The skewed workers really ran with their clocks off (as far as they ran jobs at all).
    ran_at = {
        r["id"]: r["attempted_at"]
        for r in await rows(db, "SELECT id, attempted_at FROM tenure.jobs WHERE attempted_at IS NOT NULL")
    }
    for name, skew in SKEWS.items():
        offsets = clock_offsets(clock_dir, workers[name].pid, ran_at)
        expected = float(skew.rstrip("s"))
        assert all(abs(o - expected) < 3 for o in offsets), (name, offsets[:5])
    assert any(clock_offsets(clock_dir, workers[name].pid, ran_at) for name in SKEWS)

    last = {name: fired[-1]["slot"] for name, fired in by_schedule.items()}
    await asyncio.sleep(GAP)
    restarted = spawn_worker("w5", lease=10.0, app=CRON_APP)

    async def first_tick() -> list[dict[str, Any]] | None:
        assert restarted.popen.poll() is None, restarted.log()[-3000:]
        found = [f for f in await fires(db) if f["worker"] == "w5"]
        return found if {f["schedule"] for f in found} == set(SCHEDULES) else None

    await wait_until(first_tick, timeout=30, what="the restarted worker's first fires")
    restarted.stop()
    after = await fires(db)
    batches: dict[str, list[datetime]] = {}
    for name in SCHEDULES:
        mine = [f for f in after if f["schedule"] == name and f["slot"] > last[name]]
        assert {f["worker"] for f in mine} == {"w5"}
        first_at = min(f["fired_at"] for f in mine)
        batch = [f["slot"] for f in mine if f["fired_at"] == first_at]
        assert contiguous(batch), (name, batch)
        assert batch[-1] <= first_at < batch[-1] + SECOND + timedelta(seconds=GRACE)
        holes = (batch[0] - last[name]) // SECOND - 1
        assert holes >= 1, f"{name}: no slot of the gap was skipped: last {last[name]}, then {batch}"
        batches[name] = batch
    # One tick planned all three from one reading of the database's now: they end at the same
    # slot and differ only by the missed slots each policy keeps.
    assert len({b[-1] for b in batches.values()}) == 1, batches
    on_time = len(batches["cron.skip"])
    assert batches["cron.skip"][0] >= batches["cron.skip"][-1] - timedelta(seconds=GRACE)
    for name in SCHEDULES:
        assert len(batches[name]) == on_time + KEEPS[name], (name, batches)
    print(
        f"after a {GAP:.0f}s gap: {on_time} on-time slot(s); kept "
        + ", ".join(f"{n}={len(b)}" for n, b in batches.items())
    )
