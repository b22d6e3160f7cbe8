"""A PostgreSQL failover survived under load, with real engines.

pg_auto_failover runs a primary and a synchronous standby; three real `tenure worker` processes
run the demo bank's transfers on the multi-host DSN (`target_session_attrs=read-write`), two of
them with clocks minutes off. A planned switchover, then a SIGKILL of the primary's postmaster,
each while a producer enqueues: the workers find the new primary by themselves, the queue drains,
no acknowledged job is lost, no transfer is applied twice, and every lease live at the failover
completes under its token or expires and is recovered. The time from the failover to the first
completion after it is printed (database times).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _bank_load import LEASE, SKEWED, FailoverRun, check_bank, run_bank_through_failover
from _cluster import FailoverCluster

pytestmark = [pytest.mark.slow, pytest.mark.crash]


def report(run: FailoverRun, checks: dict[str, object]) -> None:
    to_first, gap = run.first_completion_after()
    print(
        f"\n{run.kind}: first completion {to_first:.2f}s after the failover began "
        f"(longest gap without a completion {gap:.2f}s; the {run.kind} itself took "
        f"{run.failover_seconds:.2f}s); {checks}"
    )
    for name, stats in run.worker_stats.items():
        print(f"  {name}{' (clock ' + SKEWED[name] + ')' if name in SKEWED else ''}: {stats}")


def check_synchronous(cluster: FailoverCluster) -> None:
    """The primary waits for its standby's flush before acknowledging a commit."""
    settings = cluster.synchronous_settings()
    assert settings["names"].startswith("ANY 1 (pgautofailover_standby_"), settings
    assert settings["commit"] == "on", settings


def check_skewed_workers(run: FailoverRun) -> None:
    """The skewed workers ran jobs on both sides of the failover under leases of LEASE seconds
    in database time, and stopped cleanly."""
    assert run.skewed_leases, "no skewed worker held a lease when sampled"
    for lease in run.skewed_leases:
        assert abs(lease["seconds"] - LEASE) < 0.01, f"a skewed worker's lease is not {LEASE}s: {lease}"
    for name in SKEWED:
        stats = run.worker_stats[name]
        assert stats is not None, f"{name} did not exit cleanly (see {run.run_dir / (name + '.log')})"
        assert stats["succeeded"] > 0, f"{name} completed nothing: {stats}"


def check_workers_reconnected(run: FailoverRun) -> None:
    """Every worker completed jobs after the failover: it found the new primary by itself."""
    for name, stats in run.worker_stats.items():
        assert stats is not None, f"{name} did not exit cleanly (see {run.run_dir / (name + '.log')})"
    assert sum(1 for t in run.completions if t > run.failover_at) > 0


async def test_switchover_under_load_loses_nothing(cluster: FailoverCluster, tmp_path: Path) -> None:
    """A planned switchover under load: workers move to the new primary; every bank check holds."""
    check_synchronous(cluster)
    before = cluster.primary()
    run = await run_bank_through_failover(cluster, tmp_path, "switchover", cluster.switchover)
    assert cluster.primary() is not before, "the switchover did not move the primary"
    checks = await check_bank(cluster, run)
    report(run, checks)
    check_workers_reconnected(run)
    check_skewed_workers(run)
    assert checks["live_at_failover"] > 0, "no lease was live at the switchover: the load was too light"


async def test_primary_killed_under_load_loses_nothing(cluster: FailoverCluster, tmp_path: Path) -> None:
    """SIGKILL of the primary's postmaster under load: the monitor promotes the synchronous
    standby, workers reconnect, nothing acknowledged is lost and nothing is applied twice."""
    cluster.wait_healthy(timeout=60)
    check_synchronous(cluster)
    standby = cluster.standby()

    def kill_and_wait_for_promotion() -> None:
        old = cluster.kill_primary()
        try:
            cluster.wait_for_states({standby.name: "wait_primary"}, timeout=60)
        finally:
            cluster.thaw(old)  # its keeper rejoins it as a standby (pg_rewind), in the background

    run = await run_bank_through_failover(cluster, tmp_path, "kill", kill_and_wait_for_promotion)
    assert cluster.primary() is standby
    checks = await check_bank(cluster, run)
    report(run, checks)
    check_workers_reconnected(run)
    check_skewed_workers(run)
    assert checks["live_at_failover"] > 0, "no lease was live at the kill: the load was too light"
