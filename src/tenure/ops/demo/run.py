"""`tenure demo`: set up the bank, run real workers under faults, then check the invariants."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from tenure.db.connect import ResolvedDsn, connect, describe_dsn, resolve_dsn
from tenure.model.errors import ConfigurationError
from tenure.ops.demo.bank import TRANSFER
from tenure.ops.demo.database import check_database_name, prepare, recreate_database
from tenure.ops.demo.faults import Faults
from tenure.ops.demo.fleet import Fleet
from tenure.ops.demo.queries import BankQueries
from tenure.ops.demo.queries import Progress as Snapshot
from tenure.ops.demo.render import fault_line, render_report
from tenure.ops.demo.report import Invariant, read_report
from tenure.ops.demo.workload import make_workload

POLL_SECONDS = 0.2


def run_demo(args: argparse.Namespace) -> int:
    """Exit status 0 when every invariant holds, 1 otherwise."""
    _check_args(args)
    return asyncio.run(_run(args))


def _check_args(args: argparse.Namespace) -> None:
    if args.transfers < 1 or args.accounts < 2:
        raise ConfigurationError("the demo needs --transfers >= 1 and --accounts >= 2")
    if args.workers < 1 or args.concurrency < 1:
        raise ConfigurationError("the demo needs --workers >= 1 and --concurrency >= 1")
    if not args.no_faults and args.workers < 2:
        raise ConfigurationError(
            "faults need --workers >= 2 (one is killed, one paused); or pass --no-faults"
        )
    check_database_name(args.database)
    if not args.lease > 0 or not args.timeout > 0:
        raise ConfigurationError("--lease and --timeout must be positive numbers of seconds")


async def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    console = Console(quiet=args.json)
    server = resolve_dsn(args.dsn)
    _announce(console, server, args)
    dsn = await recreate_database(server.dsn, args.database)
    workload = make_workload(args.accounts, args.transfers, args.seed)
    await prepare(dsn, args.schema, workload)
    console.print(f"opened {args.accounts} accounts holding {workload.total_money} in total")
    console.print(
        f"enqueued {args.transfers} transfers; starting {args.workers} workers, lease {args.lease:g}s"
    )

    bank = BankQueries(args.schema)
    run_dir = Path(tempfile.mkdtemp(prefix="tenure-demo-"))
    fleet = Fleet(
        dsn=dsn,
        schema=args.schema,
        lease=args.lease,
        concurrency=args.concurrency,
        run_dir=run_dir,
        run_id=uuid.uuid4().hex[:6],
    )
    faults = Faults(
        fleet, bank, total=args.transfers, lease=args.lease, enabled=not args.no_faults, started=started
    )
    try:
        fleet.start(args.workers)
        async with await connect(dsn) as conn:
            with _progress(console, args.transfers) as bar:
                failure = await _drive(conn, bank, faults, fleet, bar, console, args, started)
        fleet.stop(timeout=max(1.0, args.lease) + 10.0)
    finally:
        fleet.abandon()

    async with await connect(dsn) as conn:
        report = await read_report(conn, bank, enqueued=args.transfers, total_money=workload.total_money)
    if failure is not None:
        Console(stderr=True).print(f"[bold red]{failure}[/bold red]; worker logs in {run_dir}")
        report.invariants.append(Invariant("the run finished", False, failure))
    report.wall_seconds = time.monotonic() - started
    report.setup = _setup(args, server, run_dir)
    report.faults = [e.as_dict() for e in faults.events]
    report.workers = [
        {"name": w.name, "pid": w.pid, "signals": w.fate, "stats": w.stats()} for w in fleet.workers
    ]
    keep_logs = args.keep_logs or not report.ok
    if not keep_logs:
        shutil.rmtree(run_dir, ignore_errors=True)
        report.setup["worker_logs"] = None
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, default=str))
    else:
        render_report(console, report)
        if keep_logs:
            console.print(f"[dim]worker logs: {run_dir}[/dim]")
        console.print(
            f"See every job, crash and fenced write in the browser: {_dashboard_command(args, server)}"
        )
    return 0 if report.ok else 1


def _dashboard_command(args: argparse.Namespace, server: ResolvedDsn) -> str:
    """The command that opens this run in the dashboard."""
    parts = ["tenure dashboard"]
    if not server.embedded:
        parts.append("--dsn ...")  # the user's own DSN: not echoed, it may carry a password
    parts.append("--demo" if args.database == "tenure_demo" else f"--demo {args.database}")
    if args.schema != "tenure":
        parts.append(f"--schema {args.schema}")
    return "[bold]" + " ".join(parts) + "[/bold]"


def _setup(args: argparse.Namespace, server: ResolvedDsn, run_dir: Path) -> dict[str, Any]:
    return {
        "server": "embedded" if server.embedded else describe_dsn(server.dsn),
        "embedded_data_dir": server.data_dir,
        "database": args.database,
        "schema": args.schema,
        "accounts": args.accounts,
        "transfers": args.transfers,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "lease_seconds": args.lease,
        "faults": not args.no_faults,
        "worker_logs": str(run_dir),
    }


def _announce(console: Console, server: ResolvedDsn, args: argparse.Namespace) -> None:
    where = (
        f"the embedded PostgreSQL (data in {server.data_dir})"
        if server.embedded
        else describe_dsn(server.dsn)
    )
    console.print(f"tenure demo: database {args.database!r} on {where}")


async def _drive(
    conn: AsyncConnection[Any],
    bank: BankQueries,
    faults: Faults,
    fleet: Fleet,
    bar: Progress | None,
    console: Console,
    args: argparse.Namespace,
    started: float,
) -> str | None:
    """Watches the run and injects the faults; returns why the run could not finish, if so."""
    while True:
        snapshot = await bank.progress(conn, TRANSFER)
        if bar is not None:
            bar.update(bar.task_ids[0], completed=snapshot.finished, status=_status(snapshot))
        event = await faults.step(conn, snapshot)
        if event is not None:
            console.print(fault_line(event))
        unfinished = args.transfers - snapshot.finished
        if unfinished <= 0 and faults.done:
            return None
        if not any(w.alive for w in fleet.workers):
            return f"every worker exited with {unfinished} transfers unfinished"
        if time.monotonic() - started > args.timeout:
            return f"timed out after {args.timeout:g}s with {unfinished} transfers unfinished"
        await asyncio.sleep(POLL_SECONDS)


def _status(s: Snapshot) -> str:
    return f"expired {s.expired} · fenced {s.fenced} · dead {s.dead}"


@contextlib.contextmanager
def _progress(console: Console, total: int) -> Iterator[Progress | None]:
    if console.quiet:
        yield None
        return
    bar = Progress(
        BarColumn(bar_width=24),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("[dim]{task.fields[status]}"),
        console=console,
    )
    bar.add_task("transfers", total=total, status="")
    with bar:
        yield bar
