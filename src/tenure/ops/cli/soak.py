"""`tenure soak`: the bank and four other job kinds under a schedule of real faults."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_soak(args: argparse.Namespace) -> int:
    from tenure.lab.soak.run import run_soak

    return run_soak(args)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "soak",
        parents=[common],
        help="run real workers under crashes, restarts, partitions and clock skew; check nothing is lost",
        description=(
            "Without --dsn the soak starts its own PostgreSQL in a temporary directory, so it can "
            "restart it; network faults need root (a network namespace per partitioned worker)."
        ),
    )
    p.add_argument(
        "--topology",
        choices=("direct", "pgbouncer", "failover"),
        default="direct",
        help="direct: workers on the soak's own PostgreSQL; pgbouncer: through a real PgBouncer "
        "(transaction mode); failover: a pg_auto_failover primary and synchronous standby, "
        "with switchovers and primary kills among the faults",
    )
    p.add_argument("--duration", type=float, default=120.0, help="seconds of load and faults")
    p.add_argument("--rate", type=float, default=20.0, help="jobs enqueued per second")
    p.add_argument("--workers", type=int, default=4, help="worker processes (at least 4)")
    p.add_argument("--concurrency", type=int, default=8, help="jobs in flight per worker")
    p.add_argument("--lease", type=float, default=2.0, help="lease seconds")
    p.add_argument("--accounts", type=int, default=50)
    p.add_argument("--fault-gap", type=float, default=3.0, help="seconds between faults")
    p.add_argument(
        "--faults",
        default=None,
        help="inject only these fault kinds, comma-separated (kill,pause,terminate,...; default: "
        "every kind); the topology's own server faults always run, and each kind named must run",
    )
    p.add_argument("--drain-timeout", type=float, default=120.0, help="seconds to finish after the load")
    p.add_argument("--report-every", type=float, default=10.0, help="seconds between progress lines")
    p.add_argument(
        "--restart-server",
        action="store_true",
        help="with --dsn: allow restarting that server (never done otherwise)",
    )
    p.add_argument(
        "--database",
        default="tenure_demo_soak",
        help="the soak's own database, dropped and recreated (name must start with tenure_demo)",
    )
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep-logs", action="store_true", help="keep worker logs even when all is well")
    p.set_defaults(handler=cmd_soak)
