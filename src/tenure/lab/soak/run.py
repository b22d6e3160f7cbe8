"""`tenure soak`: load, faults, drain, then the accounting, read back from the database."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import shutil
import signal
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection
from psycopg import Error as DatabaseError

from tenure import Client, ConfigurationError, EnqueuedJob, JobSpec, NotReplicated, Tenure, TenureError
from tenure.db.connect import connect
from tenure.db.migrate import WORKER_SCHEMA_FLOOR, latest_version, migrate
from tenure.db.schedule_queries import ScheduleQueries
from tenure.lab.passes import recover_at_once
from tenure.lab.soak import ordered_effects
from tenure.lab.soak import orm as orm_connections
from tenure.lab.soak.acknowledgements import Acknowledgements
from tenure.lab.soak.app import LIMITED_MAX, LIMITED_QUEUE, SNOOZES, TICK_SCHEDULE, Kind, app
from tenure.lab.soak.attempts import host_clock, overlaps, read_intervals
from tenure.lab.soak.faults import FaultKind, FaultRecord, FaultSchedule, fault_kinds
from tenure.lab.soak.fleet import SoakFleet, faketime_available
from tenure.lab.soak.network import NetworkUnavailable, WorkerNetwork
from tenure.lab.soak.operator import DashboardOperator
from tenure.lab.soak.queries import SoakQueries
from tenure.lab.soak.report import Check, SoakReport, render
from tenure.lab.soak.roles import SoakRole
from tenure.lab.soak.scope import FaultScope
from tenure.lab.soak.signals import Signaller
from tenure.lab.soak.topology import Topology, make_topology
from tenure.lab.soak.waiters import ResultWaiters
from tenure.lab.soak.workflows import SoakWorkflows
from tenure.lab.soak.workload import RESULT_WANTED, WAITING_KINDS, Mixer, expected
from tenure.ops.demo.database import check_database_name, recreate_database
from tenure.ops.demo.queries import BankQueries
from tenure.ops.demo.report import read_bank
from tenure.ops.demo.workload import Workload, make_workload
from tenure.security.roles import Role

TICK = 0.25
MISSING_CHECK = "no acknowledged job missing"


def run_soak(args: argparse.Namespace) -> int:
    """Exit status 0 when every check holds, 1 otherwise."""
    _check_args(args)
    # SIGTERM unwinds like Ctrl-C, so the workers, the namespace, the iptables rules and the
    # server are cleaned up rather than left behind.
    signal.signal(signal.SIGTERM, _interrupted)
    return asyncio.run(_run(args))


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _check_args(args: argparse.Namespace) -> None:
    if not args.duration > 0 or not args.rate > 0 or not args.lease > 0:
        raise ConfigurationError("--duration, --rate and --lease must be positive numbers")
    if args.workers < 4:
        raise ConfigurationError(
            "the soak needs --workers >= 4 (one partitioned, two with skewed clocks, one plain)"
        )
    if args.accounts < 2 or args.concurrency < 1:
        raise ConfigurationError("the soak needs --accounts >= 2 and --concurrency >= 1")
    check_database_name(args.database)
    if args.dsn and args.topology != "direct":
        raise ConfigurationError(f"--topology {args.topology} builds its own servers: run it without --dsn")


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.json:
        print(message, flush=True)


async def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    run_id = uuid.uuid4().hex[:6]
    run_dir = Path(tempfile.mkdtemp(prefix="tenure-soak-"))
    network: WorkerNetwork | None = None
    network_missing = ""
    topology: Topology | None = None
    fleet: SoakFleet | None = None
    role: SoakRole | None = None
    producer: SoakRole | None = None
    operator: DashboardOperator | None = None
    report: SoakReport | None = None
    try:
        role_name = f"tenure_soak_worker_{run_id}"
        if args.dsn:
            given = Tenure(args.dsn).resolved_dsn()
            network_missing = "network faults need the soak's own server (run without --dsn)"
        else:
            given = None
            try:
                network = WorkerNetwork.create(run_id)
            except NetworkUnavailable as exc:
                network_missing = f"no network namespace on this machine: {exc}"
        extra_hosts = [network.host_ip] if network else []
        topology = make_topology(args.topology, given, extra_hosts, run_dir, role_name)
        if given is None:
            _say(args, f"tenure soak: starting the {topology.name} topology")
        await asyncio.to_thread(topology.start)
        server_dsn = topology.maintenance_dsn()
        where = topology.describe()
        _say(args, f"tenure soak: {args.duration:g}s of load on {where}")
        dsn = await recreate_database(server_dsn, args.database)
        workload = make_workload(args.accounts, 0, args.seed)
        only = fault_kinds(args.faults)
        upgrading = only is None or FaultKind.UPGRADE in only
        await _prepare(dsn, args.schema, workload, upgrading=upgrading)
        role = SoakRole(role_name, args.schema)
        producer = SoakRole(f"tenure_soak_producer_{run_id}", args.schema, Role.PRODUCER)
        async with await connect(dsn) as conn:
            await role.create(conn)
            await producer.create(conn)

        fleet = SoakFleet(
            dsn=dsn,
            schema=args.schema,
            lease=args.lease,
            concurrency=args.concurrency,
            run_dir=run_dir,
            run_id=run_id,
            network=network,
            role_name=role.name,
            connect_environment=topology.worker_environment,
        )
        fleet.start(args.workers)
        operator = DashboardOperator(dsn, args.schema)
        roles = {w.name: fleet.role(w.name).value for w in fleet.workers}
        _say(args, "workers: " + ", ".join(f"{n} ({r})" for n, r in roles.items()))
        acked: dict[str, list[int]] = {k.value: [] for k in Kind if k is not Kind.INJECTED}
        acks = Acknowledgements(dsn, args.schema, started, topology.cluster_states)
        scope = FaultScope(
            dsn,
            args.schema,
            args.lease,
            database=args.database,
            worker_prefix=f"{fleet.owner_prefix}-{run_id}-",
            role=role,
            producer=producer,
            operator=operator,
        )
        faults = FaultSchedule(
            fleet=fleet,
            scope=scope,
            server=topology,
            network=network,
            network_missing=network_missing,
            started=started,
            acked=acked,
            only=only,
        )
        waiting = Client(dsn, schema=args.schema)
        flows = SoakWorkflows(
            Client(topology.producer_dsn(dsn), schema=args.schema, registry=app.registry),
            Signaller(args.lease, None if args.seed is None else args.seed + 7),
        )
        waiters = ResultWaiters(waiting, timeout=args.duration + args.drain_timeout + 60)
        try:
            failures, limited_peak = await _load_and_drain(
                args, dsn, topology.producer_dsn(dsn), fleet, faults, acked, acks, started, waiters, operator,
                flows,
            )  # fmt: skip
            await waiters.finish(timeout=30)
        finally:
            await waiting.close()
            await flows.client.close()
        exited = fleet.exited_on_their_own()
        fleet.stop(timeout=max(1.0, args.lease) + 15.0)
        finished = host_clock()
        recovered = await _recover_everything(dsn, args)
        # After the stop: while workers run, their schedulers fire a job every second, and one
        # fired after the drain would be left unfinished.
        await operator.final_round()
        report = await _account(args, dsn, workload.total_money, acked, acks, recovered)
        async with await connect(dsn) as conn:
            report.checks += await ordered_effects.checks(conn, args.schema, Kind.EFFECT.value, run_dir)
        report.failures.extend(failures)
        report.checks += _control_checks(report, faults)
        report.checks += operator.checks()
        async with await connect(dsn) as conn:
            report.checks += await _result_checks(conn, args.schema, waiters)
            report.checks += await _limit_and_schedule_checks(conn, args.schema, limited_peak)
            report.checks += await faults.checks(conn)
            report.checks += await _orm_checks(conn, args.schema, faults, run_dir)
            report.checks += await flows.checks(conn, args.schema, run_dir)
        report.checks.append(
            Check(
                "no worker exited on its own (none gave up on a failing service)",
                not exited,
                ", ".join(exited) or f"{len(fleet.workers)} workers ran until stopped or killed",
            )
        )
        report.edges = {
            "upgrade": faults.upgrade.result,
            "pending_lock_holds": faults.pending_locks.holds,
            "injected_rows": faults.bad_rows.rows,
            "forged_requests": faults.forged.trials,
            "orm_connections_terminated": faults.orm_terminated,
            **faults.poison.report(),
        }
        async with await connect(dsn) as conn:
            report.recoveries = await _recoveries(conn, args.schema, faults)
            report.vacuums = await SoakQueries(args.schema).vacuums(conn)
        report.checks += _recovery_checks(report.recoveries)
        report.faults = [r.as_dict() for r in faults.records]
        report.fault_counts = faults.counts()
        never = sorted(kind for kind, count in report.fault_counts.items() if count == 0)
        skipped = {r.kind.name.lower(): r.detail for r in faults.records if r.skipped}
        report.checks.append(
            Check(
                "every kind of fault ran",
                not never,
                ", ".join(f"{k} never ran ({skipped.get(k, 'no turn came')})" for k in never)
                or f"{len(report.fault_counts)} kinds",
            )
        )
        files = {w.name: fleet.attempts_path(w.name) for w in fleet.workers}
        window = overlaps(read_intervals(files, faults.killed_at, finished), faults.frozen)
        report.add_window(window, args.lease, _longest_network_fault(faults.records))
        report.workers = [
            {"name": w.name, "role": fleet.role(w.name).value, "pid": w.pid, "signals": w.fate}
            for w in fleet.workers
        ]
        report.setup = {
            "topology": topology.name,
            "server": where,
            "duration_s": args.duration,
            "rate_per_s": args.rate,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "lease_s": args.lease,
            "accounts": args.accounts,
            "network_faults": network_missing or "network namespace + veth + iptables",
            "clock_skew": "libfaketime" if faketime_available() else "unavailable (no libfaketime)",
            "schema_at_start": WORKER_SCHEMA_FLOOR if upgrading else latest_version(),
            "run_dir": str(run_dir),
        }
        report.wall_seconds = time.monotonic() - started
    finally:
        if operator is not None:
            with contextlib.suppress(Exception):
                await operator.close()
        if fleet is not None:
            fleet.abandon()
        for made in (role, producer):
            if made is not None:
                with contextlib.suppress(Exception):
                    async with await connect(dsn) as conn:
                        await made.drop(conn)
        if network is not None:
            network.destroy()
        if topology is not None:
            # The servers' own account (a cluster's event log, every node's log) outlives them,
            # beside the workers' logs: kept on disk when a check fails.
            with contextlib.suppress(Exception):
                kept = topology.keep_evidence(run_dir / "cluster")
                if report is not None and kept:
                    report.evidence = [str(p) for p in kept]
            topology.stop()
    assert report is not None  # an exception before it was made has left this function
    if not report.ok:
        report.logs_kept_at = str(run_dir)
        # The report stays beside the logs it points into, whoever read (or lost) its output.
        (run_dir / "report.json").write_text(json.dumps(report.as_dict(), indent=2, default=str))
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, default=str))
    else:
        render(report)
    if report.ok and not args.keep_logs:
        shutil.rmtree(run_dir, ignore_errors=True)
    elif not args.json:
        print(f"worker logs, attempt records and the servers' logs: {run_dir}")
    return 0 if report.ok else 1


async def _load_and_drain(
    args: argparse.Namespace,
    dsn: str,
    producer_dsn: str,
    fleet: SoakFleet,
    faults: FaultSchedule,
    acked: dict[str, list[int]],
    acks: Acknowledgements,
    started: float,
    waiters: ResultWaiters,
    operator: DashboardOperator,
    flows: SoakWorkflows,
) -> tuple[list[str], int]:
    """Runs the load under faults and drains the queue, with the operator reading the dashboard
    throughout: the failures, and the most live leases the limited queue was seen holding. The
    producer enqueues on `producer_dsn` (through PgBouncer, in that topology)."""
    stop_faults = asyncio.Event()
    drained = asyncio.Event()
    watching = asyncio.create_task(operator.watch(drained, ready=faults.upgrade.current))

    def on_fault(record: FaultRecord) -> None:
        state = "skipped" if record.skipped else "done"
        _say(
            args,
            f"{record.at:7.1f}s  {record.kind.value:<44} {record.target:<6} {state}: {record.detail}",
        )

    fault_task = asyncio.create_task(faults.run(stop_faults, args.fault_gap, on_fault))
    sampling = asyncio.create_task(_sample_limited(args, dsn, stop_faults))
    replication = asyncio.create_task(acks.sample(stop_faults))
    failures: list[str] = []
    try:
        try:
            await asyncio.gather(
                _produce(args, producer_dsn, dsn, acked, acks, started, waiters, faults.upgrade.current),
                flows.produce(faults.upgrade.current, until=started + args.duration),
            )
        finally:
            stop_faults.set()
            await replication
            try:
                await fault_task
            except Exception as exc:  # reported, never lost with the schedule
                failures.append(f"the fault schedule stopped: {type(exc).__name__}: {exc}")
        total = sum(len(ids) for ids in acked.values())
        never = await flows.send_owed(args.drain_timeout)
        _say(
            args,
            f"load over: {total} jobs enqueued, {len(flows.enqueued)} workflows ({never} step signals "
            "never sent); draining with every fault healed",
        )
        await _end_schedule(dsn, args.schema)
        failures += await _drain(args, dsn, fleet)
    finally:
        drained.set()
        await watching
    return failures, await sampling


async def _prepare(dsn: str, schema: str, workload: Workload, *, upgrading: bool) -> None:
    """Tenure's schema at the oldest version workers run on when the upgrade fault runs (it
    brings the schema to the latest under load), else at the latest; and the bank with its
    accounts opened."""
    async with await connect(dsn) as conn:
        await migrate(conn, schema, up_to=WORKER_SCHEMA_FLOOR if upgrading else None)
        async with conn.transaction():
            bank = BankQueries(schema)
            await bank.create_bank(conn)
            await bank.open_accounts(conn, workload.balances)


async def _end_schedule(dsn: str, schema: str) -> None:
    """Pauses the every-second schedule, as an operator would, so that the drain can end: a
    slot fired between the drain's last look and the workers' stop would be left unfinished.
    Its span, which the schedule check counts, ends at the pause."""
    async with await connect(dsn) as conn:
        await ScheduleQueries(schema).pause(conn, TICK_SCHEDULE, actor="soak", reason="load over")


async def _drain(args: argparse.Namespace, dsn: str, fleet: SoakFleet) -> list[str]:
    """Waits until every job has finished: what went wrong if they did not."""
    queries = SoakQueries(args.schema)
    deadline = time.monotonic() + args.drain_timeout
    unfinished: int | str = "unknown"
    while True:
        # A look that a failover ends mid-way is taken again on a new connection: the cluster
        # may still be choosing its primary when the load ends.
        with contextlib.suppress(TenureError, OSError, DatabaseError):
            async with await connect(dsn) as conn:
                unfinished = (await queries.progress(conn))["unfinished"]
            if unfinished == 0:
                return []
        if time.monotonic() > deadline:
            return [f"drain timed out with {unfinished} jobs unfinished"]
        if not fleet.live():
            return ["every worker exited before the queue drained"]
        await asyncio.sleep(0.5)


async def _produce(
    args: argparse.Namespace,
    producer_dsn: str,
    dsn: str,
    acked: dict[str, list[int]],
    acks: Acknowledgements,
    started: float,
    waiters: ResultWaiters,
    schema_current: asyncio.Event,
) -> None:
    """Enqueues `rate` jobs a second until the load time is over; counts only acknowledged jobs.

    An enqueue that fails (the server restarting) is not retried: whether it committed is
    unknown to the producer, so its jobs are neither counted as enqueued nor as lost. One that
    PostgreSQL says may not be replicated (NotReplicated) was not acknowledged either: it is
    counted apart (`acks`), with the ids committed on the primary.

    Every other tick sends its jobs one enqueue each, as an application enqueuing in its own
    transactions does (a job without keys then takes job_insert_one), and the rest as one batch
    (job_insert_many): both statements meet every fault.

    Jobs that wait for a signal are enqueued once the schema has waits (after the upgrade fault),
    each with its signal sent before it or after it (signals.py); when the load is over, every
    signal still owed is sent.
    """
    mixer = Mixer(args.accounts, args.lease, args.seed)
    signaller = Signaller(args.lease, args.seed)
    queries = SoakQueries(args.schema)
    client = Client(producer_dsn, schema=args.schema, registry=app.registry)
    next_report = time.monotonic() + args.report_every
    owed = 0.0
    one_by_one = False
    try:
        while time.monotonic() - started < args.duration:
            one_by_one = not one_by_one
            owed += args.rate * TICK
            size, owed = int(owed), owed - int(owed)
            if size:
                batch = [
                    (Kind.NOOP, {})
                    if kind in WAITING_KINDS and not schema_current.is_set()
                    else (kind, payload)
                    for kind, payload in mixer.batch(size)
                ]
                sent_early = {
                    payload["signal"]
                    for kind, payload in batch
                    if kind in WAITING_KINDS
                    and signaller.early()
                    and await signaller.send(client, payload["signal"])
                }
                specs = [
                    client.builder.spec(
                        kind.value,
                        payload,
                        ordering_key=payload.get("key"),
                        result_wanted=kind in RESULT_WANTED,
                    )
                    for kind, payload in batch
                ]
                jobs = await _enqueue(client, specs, one_by_one, acks)
                acks.acknowledged([job.id for job in jobs if job is not None])
                for (kind, payload), job in zip(batch, jobs, strict=True):
                    if job is None:
                        continue
                    acked[kind.value].append(job.id)
                    if kind in RESULT_WANTED:
                        waiters.watch(job.id)
                    if kind in WAITING_KINDS and payload["signal"] not in sent_early:
                        signaller.owe(payload["signal"])
            await signaller.tick(client)
            if time.monotonic() >= next_report:
                next_report += args.report_every
                # A progress line is only for the reader: a failover that ends its query mid-way
                # (AdminShutdown) skips one line and must not end the producer.
                with contextlib.suppress(TenureError, OSError, DatabaseError):
                    async with await connect(dsn) as conn:
                        p = await queries.progress(conn)
                    _say(
                        args,
                        f"{time.monotonic() - started:7.1f}s  stored {p['stored']}, unfinished "
                        f"{p['unfinished']}, running {p['running']}, leases expired {p['expired']}, "
                        f"stale writes fenced {p['fenced']}",
                    )
            await asyncio.sleep(TICK)
        # Every waiting job's signal, before the drain waits for them to finish.
        deadline = time.monotonic() + args.drain_timeout
        while signaller.owed and time.monotonic() < deadline:
            await signaller.tick(client, everything=True)
            if signaller.owed:
                await asyncio.sleep(0.5)
        _say(
            args,
            f"signals: {signaller.sent} sent ({signaller.duplicates} a second time), "
            f"{signaller.failed_sends} sends failed and were tried again, {len(signaller.owed)} never sent",
        )
    finally:
        await client.close()


async def _enqueue(
    client: Client, specs: list[JobSpec], one_by_one: bool, acks: Acknowledgements
) -> list[EnqueuedJob | None]:
    """Each spec's job, or None where its enqueue failed (then unknown whether it committed) or
    was not replicated (then committed on the primary only, and counted apart in `acks`)."""
    groups = [[spec] for spec in specs] if one_by_one else [specs]
    jobs: list[EnqueuedJob | None] = []
    for group in groups:
        try:
            jobs.extend(await client.enqueue_many(group))
        except NotReplicated as refused:
            acks.refused(refused.job_ids)
            jobs.extend([None] * len(group))
        except (TenureError, OSError):
            jobs.extend([None] * len(group))
    return jobs


async def _recover_everything(dsn: str, args: argparse.Namespace) -> int:
    """With every worker stopped: waits out every lease still held, then recovers them all."""
    async with await connect(dsn) as conn:
        outstanding = await SoakQueries(args.schema).leases_outstanding(conn)
    if outstanding["running"]:
        await asyncio.sleep(float(outstanding["seconds_left"]) + 0.1)
    return await recover_at_once(dsn, args.schema, name="soak-recovery")


async def _account(
    args: argparse.Namespace,
    dsn: str,
    total_money: int,
    acked: dict[str, list[int]],
    acks: Acknowledgements,
    recovered_at_end: int,
) -> SoakReport:
    queries = SoakQueries(args.schema)
    bank = BankQueries(args.schema)
    async with await connect(dsn) as conn:
        report = await _read_report(conn, queries, bank, total_money, acked, recovered_at_end)
        missing = report.jobs["missing_acknowledged_ids"]
        not_replicated_stored = len(acks.not_replicated) - len(
            await queries.missing(conn, acks.not_replicated)
        )
    report.replication = {
        "acknowledged_while": acks.counts(),
        "not_replicated_enqueues": len(acks.not_replicated) + acks.not_replicated_unknown,
        "not_replicated_jobs_stored": not_replicated_stored,
        "missing_acknowledged_while": acks.of(missing),
    }
    if missing:
        shown = "; ".join(f"job {m['job']} while {m['state']} {m['cluster']}" for m in acks.of(missing)[:3])
        report.checks = [
            replace(c, detail=f"{c.detail}, acknowledged: {shown}") if c.name == MISSING_CHECK else c
            for c in report.checks
        ]
    return report


async def _read_report(
    conn: AsyncConnection[Any],
    queries: SoakQueries,
    bank: BankQueries,
    total_money: int,
    acked: dict[str, list[int]],
    recovered_at_end: int,
) -> SoakReport:
    all_acked = [i for ids in acked.values() for i in ids]
    missing_ids = await queries.missing(conn, all_acked)
    missing = len(missing_ids)
    outcomes = await queries.outcomes(conn)
    events = await queries.events(conn)
    leases = await queries.leases_outstanding(conn)
    held = await read_bank(conn, bank, Kind.TRANSFER.value)
    codes = await queries.error_codes(conn)
    handed = await queries.handed(conn)

    states: Counter[str] = Counter()
    unexpected: Counter[str] = Counter()
    unfinished = 0
    for row in outcomes:
        states[row["state"]] += row["jobs"]
        if row["state"] in ("scheduled", "pending", "running"):
            unfinished += row["jobs"]
        elif not expected(row["task"], row["state"], row["code"]):
            unexpected[f"{row['task']} {row['state']} {row['code']}".strip()] += row["jobs"]
    event_counts: Counter[str] = Counter()
    for e in events:
        event_counts[e["event"]] += e["n"]
    stored = sum(states.values())
    report = SoakReport(
        jobs={
            "enqueued": len(all_acked),
            "enqueued_by_kind": {k: len(v) for k, v in acked.items()},
            "stored": stored,
            "succeeded": states["succeeded"],
            "dead": states["dead"],
            "cancelled": states["cancelled"],
            "missing_acknowledged": missing,
            "missing_acknowledged_ids": missing_ids[:100],
            "unfinished": unfinished,
            "unexpected_outcomes": dict(unexpected),
            # Started from a worker's offer in their enqueue, with no claim (docs/hand-off.md).
            "handed_to_an_offer": handed,
        },
        leases={
            "lease_expirations": event_counts["lease_expired"],
            "stale_writes_rejected": event_counts["fencing_lost"],
            "retries": event_counts["retry"],
            "released_at_shutdown": event_counts["released"],
            "recovered_after_stop": recovered_at_end,
            "still_running": int(leases["running"]),
        },
        money={
            "opening": total_money,
            "now": int(held.money["actual"] or 0),
            "transfers_succeeded": int(held.once["succeeded"]),
            "applied_more_than_once": int(held.once["duplicated"]),
        },
    )
    report.checks += [
        Check(MISSING_CHECK, missing == 0, f"{missing} missing"),
        Check("no job left pending or running", unfinished == 0, f"{unfinished} unfinished"),
        Check(
            "every job ended as its kind must",
            not unexpected,
            ", ".join(f"{k}: {n}" for k, n in unexpected.items()) or "all as expected",
        ),
        Check("no lease held after the stop", int(leases["running"]) == 0, f"{leases['running']} held"),
        *held.invariants(total_money),
        Check(
            "no MAX_RUNTIME recorded (a handler's own TimeoutError is its own failure)",
            codes.get("MAX_RUNTIME", 0) == 0,
            f"{codes.get('MAX_RUNTIME', 0)} recorded, {codes.get('TimeoutError', 0)} handler timeouts",
        ),
    ]
    return report


async def _sample_limited(args: argparse.Namespace, dsn: str, stop: asyncio.Event) -> int:
    """Samples the limited queue's live leases every 50 ms through the load; the peak seen."""
    queries = SoakQueries(args.schema)
    peak = 0
    while not stop.is_set():
        with contextlib.suppress(Exception):  # a fault may cut this session off: sample again
            async with await connect(dsn) as conn:
                while not stop.is_set():
                    peak = max(peak, await queries.limited_live(conn, LIMITED_QUEUE))
                    await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    return peak


async def _limit_and_schedule_checks(conn: AsyncConnection[Any], schema: str, peak: int) -> list[Check]:
    """The limited queue never held more live leases than its limit, and the every-second
    schedule fired each second of its span exactly once, each fire a job that succeeded."""
    fires = await SoakQueries(schema).schedule_fires(conn, TICK_SCHEDULE)
    return [
        Check(
            "a limited queue never ran over its limit",
            0 <= peak <= LIMITED_MAX,
            f"peak {peak} live leases sampled every 50 ms (limit {LIMITED_MAX})",
        ),
        Check(
            "every second of the schedule fired exactly once, and each fire succeeded",
            fires["fires"] > 0
            and fires["fires"] == fires["slots"] == fires["span"] == fires["succeeded"]
            and fires["no_job"] == 0,
            f"{fires['fires']} fires for {fires['span']} seconds ({fires['slots']} distinct slots), "
            f"{fires['succeeded']} succeeded",
        ),
    ]


async def _orm_checks(
    conn: AsyncConnection[Any], schema: str, faults: FaultSchedule, run_dir: Path
) -> list[Check]:
    """Thread handlers on connections of their own (an ORM's) were cut off and went on: a dead
    connection cost the one attempt that met it (the hook discarded it), never a second, and
    every such job succeeded."""
    orm = await SoakQueries(schema).task_retries(conn, Kind.ORM.value)
    met = orm_connections.dead_met(run_dir)
    again = sum(1 for n in met.values() if n > 1)
    return [
        Check(
            "thread handlers' own connections, once killed, were replaced (none met dead twice)",
            (faults.orm_terminated > 0 or FaultKind.ORM_TERMINATE not in faults.kinds)
            and again == 0
            and orm["jobs"] > 0
            and orm["succeeded"] == orm["jobs"],
            f"{faults.orm_terminated} killed by the fault; {len(met)} met dead by a handler, {again} of "
            f"them more than once; {orm['succeeded']} of {orm['jobs']} jobs succeeded after "
            f"{orm['retried']} retries",
        )
    ]


def _control_checks(report: SoakReport, faults: FaultSchedule) -> list[Check]:
    """What the operator's faults must leave: exactly the jobs it cancelled are cancelled (the
    ledger checks prove they wrote nothing), and no claim came from the queue while paused."""
    cancelled = int(report.jobs["cancelled"])
    return [
        Check(
            "only the jobs an operator cancelled are cancelled",
            cancelled == len(faults.cancelled),
            f"{cancelled} cancelled, {len(faults.cancelled)} by the operator",
        ),
        Check(
            "no claim from a paused queue",
            faults.claims_while_paused == 0,
            f"{faults.claims_while_paused} claims while paused",
        ),
    ]


async def _result_checks(conn: AsyncConnection[Any], schema: str, waiters: ResultWaiters) -> list[Check]:
    """Snoozing jobs end succeeded after exactly SNOOZES snoozes with their result stored, and
    every caller that waited got exactly that result."""
    stored = await SoakQueries(schema).snooze_results(conn, [Kind.SNOOZE.value, Kind.THREAD_SNOOZE.value])
    wrong = {
        r["id"]: r
        for r in stored
        if r["snoozes"] != SNOOZES or r["result"] is None or r["result"].get("snoozed") != SNOOZES
    }
    results = {r["id"]: r["result"] for r in stored}
    mismatched = [i for i, value in waiters.received.items() if results.get(i) != value]
    waits = await SoakQueries(schema).wait_results(conn, [Kind.WAIT.value, Kind.THREAD_WAIT.value])
    wrong_waits = [
        r
        for r in waits
        if r["state"] != "succeeded"
        or {k: v for k, v in (r["result"] or {}).items() if k != "signal_id"}
        != {"outcome": "signalled", "payload": {"key": r["key"]}}
        or (r["signals"], r["delivered"], r["signalled"]) != (1, 1, 1)
    ]
    return [
        Check(
            "every waiting job got its own signal once, and only it (sent before or after its wait, "
            "twice with one idempotency key, through every fault)",
            not wrong_waits and bool(waits),
            f"{len(waits)} jobs waited, {len(wrong_waits)} wrong"
            + (f": {wrong_waits[:3]}" if wrong_waits else ""),
        ),
        Check(
            f"snoozing jobs snoozed exactly {SNOOZES} times and stored their result",
            not wrong and bool(stored),
            f"{len(stored)} jobs, {len(wrong)} wrong" + (f": {list(wrong.values())[:3]}" if wrong else ""),
        ),
        Check(
            "every awaited result arrived, and is the one stored",
            not waiters.failed and not mismatched and bool(waiters.received),
            f"{len(waiters.received)} received ({waiters.retries} waits resumed after a fault), "
            f"{len(waiters.failed)} failed, {len(mismatched)} differ"
            + (f": {list(waiters.failed.values())[:2]}" if waiters.failed else ""),
        ),
    ]


#: How long after a server fault is over the soak still looks for the first completion.
RECOVERY_MARGIN = timedelta(seconds=10)
#: A server fault after which nothing completes for this long has not been recovered from.
RECOVERY_BOUND = 60.0


async def _recoveries(conn: AsyncConnection[Any], schema: str, faults: FaultSchedule) -> list[dict[str, Any]]:
    """For each server fault, seconds from its start to the first completion after it, and the
    longest stretch without one (database times). Work already under way may still finish just
    after a fault begins, so "after it" means after the longest gap that follows its start,
    until a little after the fault is over."""
    queries = SoakQueries(schema)
    found = []
    done = faults.server_faults_at
    for n, (kind, began, seconds) in enumerate(done):
        # Up to a little after the fault is over, and never into the next server fault: the
        # faults that follow it make gaps of their own.
        until = began + timedelta(seconds=seconds) + RECOVERY_MARGIN
        if n + 1 < len(done):
            until = min(until, done[n + 1][1])
        times = await queries.completions_between(conn, began - timedelta(seconds=1), until)
        gap, resumed = 0.0, None
        for before, after in itertools.pairwise(times):
            if after > began and (after - before).total_seconds() > gap:
                gap, resumed = (after - before).total_seconds(), after
        found.append(
            {
                "fault": kind.name.lower(),
                "at": began.isoformat(timespec="milliseconds"),
                "first_completion_s": None
                if resumed is None
                else round((resumed - began).total_seconds(), 2),
                "longest_gap_s": round(gap, 2),
            }
        )
    return found


def _recovery_checks(recoveries: list[dict[str, Any]]) -> list[Check]:
    late = [
        r for r in recoveries if r["first_completion_s"] is None or r["first_completion_s"] > RECOVERY_BOUND
    ]
    figures = (
        ", ".join(f"{r['fault']} {r['first_completion_s']}s" for r in recoveries) or "no server fault ran"
    )
    return [
        Check(
            f"work resumed within {RECOVERY_BOUND:g}s of every server fault",
            bool(recoveries) and not late,
            f"first completion after: {figures}",
        )
    ]


def _longest_network_fault(records: list[FaultRecord]) -> float:
    network = [r.seconds for r in records if r.kind.name in ("PARTITION", "PACKET_LOSS") and not r.skipped]
    return max(network, default=0.0)
