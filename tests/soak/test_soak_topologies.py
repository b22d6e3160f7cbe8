"""`tenure soak --topology`: the same workload, faults and checks through a real PgBouncer and
across real PostgreSQL failovers (pg_auto_failover)."""

from __future__ import annotations

import pytest
from _soak import run_soak

pytestmark = [pytest.mark.slow, pytest.mark.crash]


def test_soak_through_pgbouncer_loses_nothing() -> None:
    """Workers and the producer through PgBouncer in transaction mode (LISTEN direct), under
    the faults that meet the pooler (sessions ended, a read-only database, revokes told on the
    direct LISTEN, thread handlers' own connections killed) and a PostgreSQL restart behind it:
    every check holds. The base soak runs every other fault."""
    report = run_soak("--topology", "pgbouncer", "--duration", "50", "--fault-gap", "1",
                      "--faults", "kill,pause,terminate,read_only,job_revoke,orm_terminate",
                      "--rate", "15", "--drain-timeout", "90", timeout=300)  # fmt: skip
    assert report["setup"]["topology"] == "pgbouncer"
    assert "PgBouncer" in report["setup"]["server"]
    assert report["fault_counts"]["restart"] > 0
    assert report["jobs"]["enqueued"] > 300
    print("\nfirst completion after each restart behind PgBouncer:", report["recoveries"])


def test_soak_across_switchovers_and_primary_kills_loses_nothing() -> None:
    """Under load, worker crashes, pauses and revokes, back-to-back planned switchovers and SIGKILLs
    of the primary's postmaster, on three nodes with number_sync_standbys = 1 (the topology that
    keeps every acknowledged commit through them): workers on the multi-host DSN follow the new
    primary by themselves, two of them with clocks minutes off, no acknowledged job is missing and
    every check holds; the replication state of each acknowledgement and the time to the first
    completion after each failover are reported. The base soak runs every other fault."""
    report = run_soak("--topology", "failover", "--duration", "75", "--fault-gap", "1",
                      "--faults", "kill,pause,terminate,job_revoke",
                      "--rate", "15", "--drain-timeout", "90", timeout=480, liveness_retry=True)  # fmt: skip
    assert report["setup"]["topology"] == "failover"
    assert report["fault_counts"]["switchover"] > 0 and report["fault_counts"]["primary_kill"] > 0
    assert "restart" not in report["fault_counts"]
    kinds = {r["fault"] for r in report["recoveries"]}
    assert kinds == {"switchover", "primary_kill"}, report["recoveries"]
    assert "number_sync_standbys 1" in report["setup"]["server"], report["setup"]
    assert report["evidence"], "the cluster's event log and node logs were not kept"
    print("\nfirst completion after each failover:", report["recoveries"])
    print("acknowledged while:", report["replication"]["acknowledged_while"])
    print("not replicated, counted apart:", report["replication"]["not_replicated_enqueues"])
