"""One benchmark run: every section against the same server, in one process, one after another."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tenure import Client, WorkerOptions
from tenure.db.connect import connect
from tenure.lab.bench import (
    contention,
    end_to_end,
    enqueue,
    floor,
    limits,
    peer_drains,
    peers,
    sections,
    throughput,
    waiting,
    waits,
    workflows,
)
from tenure.lab.bench.drain import TENURE_WATCH
from tenure.lab.bench.report import chart, figure_rows, print_table
from tenure.lab.bench.rounds import DrainRounds
from tenure.lab.bench.server import Databases, check_server, server_settings
from tenure.lab.bench.sizes import SECTIONS, SIZES
from tenure.lab.bench.targets import targets
from tenure.worker.event_loop import EVENT_LOOP_ENV

NOT_INSTALLED = "not installed (pip install 'tenure[bench]')"


@dataclass
class BenchOptions:
    server_dsn: str
    size: str = "standard"
    processes: int = 2
    concurrency: int = 100
    claim_batch: int = WorkerOptions().claim_batch
    sections: tuple[str, ...] = SECTIONS
    with_peers: bool = True
    out_dir: Path = Path("bench-results")
    embedded: bool = False
    show_table: bool = True
    #: The event loop of every process the benchmark starts (contenders alike).
    event_loop: str = "asyncio"


async def run(options: BenchOptions, log: Any = print) -> dict[str, Any]:
    sizes = SIZES[options.size]
    # Inherited by every worker, raw loop, peer and producer process started from here on.
    os.environ[EVENT_LOOP_ENV] = options.event_loop
    await check_server(options.server_dsn)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    contenders = sections.Contenders(options.concurrency, options.claim_batch)
    procs = options.processes
    rounds = DrainRounds(contenders, sizes.drain_sizes, procs, sizes.repeats, log)
    result: dict[str, Any] = {
        "meta": {
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "size": options.size,
            "sizes": vars(sizes) | {"jobs": sizes.jobs},
            "processes": procs,
            "concurrency_per_process": options.concurrency,
            "claim_batch": options.claim_batch,
            "raw_loops_per_process": contenders.raw_loops,
            "worker_kind": "separate OS processes (python -m tenure.lab.bench.tenure_worker: Worker.run)",
            "event_loop": options.event_loop,
            "server": "embedded" if options.embedded else "given --dsn",
            "server_settings": await server_settings(options.server_dsn),
            "machine": {"cpus": _cpus(), "python": platform.python_version(), "load_avg": _load()},
        },
        "sections": {},
    }
    out: dict[str, Any] = result["sections"]
    dbs = Databases(options.server_dsn)
    started = time.monotonic()
    try:
        dsn = await dbs.create("tenure", migrated=True)

        if "copy" in options.sections:
            log(f"copy: {sizes.copy_jobs} jobs")
            out["copy"] = await sections.copy_enqueue(dsn, sizes.copy_jobs)

        if "throughput" in options.sections or "latency" in options.sections:
            # Tenure's own sweep is for the drain target; latency alone needs only its peak.
            tenure_batches = sizes.tenure_claim_batches if "throughput" in options.sections else ()
            log(
                f"throughput: {' and '.join(map(str, sizes.drain_sizes))} no-op jobs, {procs} processes, "
                f"the raw loop at claim sizes {list(sizes.ceiling_batches)}, Tenure at the run's settings"
                + (f" and at claim batches {list(tenure_batches)}" if tenure_batches else "")
            )
            out["throughput"] = await throughput.throughput(
                dsn, rounds, sizes.ceiling_batches, tenure_batches
            )

        peer_dsns: dict[str, str] = {}

        async def peer_database(name: str) -> str:
            """The peer's own database, created and set up on first use."""
            if name not in peer_dsns:
                peer_dsns[name] = await dbs.create(name)
                await peers.SETUP[name](peer_dsns[name])
            return peer_dsns[name]

        wanted_peers = [p for p in sizes.peers if options.with_peers and "peers" in options.sections]
        out["peers"] = {}
        for name in peers.PEERS:
            if name not in wanted_peers:
                out["peers"][name] = {"skipped": "not selected"}
            elif not peers.installed(name):
                out["peers"][name] = {"skipped": NOT_INSTALLED}
            else:
                peer_dsn = await peer_database(name)
                if name == "pgqueuer":
                    out["peers"][name] = await peer_drains.pgqueuer_best(
                        peer_dsn,
                        rounds,
                        sizes.pgqueuer_batches,
                        tenure_dsn=dsn,
                        tenure_batches=sizes.tenure_claim_batches,
                    )
                else:
                    max_connections = int(result["meta"]["server_settings"]["max_connections"])
                    out["peers"][name] = await peer_drains.procrastinate_sized(
                        peer_dsn, rounds, max_connections
                    )
                if "latency" in options.sections:
                    out["peers"][name]["idle_latency"] = await _peer_latency(
                        name, peer_dsn, contenders, sizes.latency_probes, options.out_dir
                    )

        if "contention" in options.sections:
            crowd = sizes.contention_processes
            log(f"contention: {sizes.jobs} jobs drained by {crowd} processes, Tenure and the raw loop")
            out["contention"] = await contention.contention(dsn, rounds, crowd)

        if "endtoend" in options.sections:
            tp = out.get("throughput")
            raw_batch = tp["raw_n"]["batch"] if tp else options.claim_batch
            pgqueuer: end_to_end.PeerLoad | None = None
            pgqueuer_skipped = _peer_skipped("pgqueuer", options.with_peers)
            if not pgqueuer_skipped:
                batch = out["peers"]["pgqueuer"].get("batch", peer_drains.PGQUEUER_UNSWEPT_BATCH)
                pgqueuer = end_to_end.PeerLoad(await peer_database("pgqueuer"), batch)
            log(
                f"end to end: {sizes.end_to_end_jobs} jobs enqueued one per transaction by {procs} producer "
                f"processes x {sizes.producer_connections} connections while {procs} processes drain"
                + ("" if pgqueuer is None else f"; PgQueuer too, batch {pgqueuer.batch}")
            )
            out["endtoend"] = await end_to_end.end_to_end(
                dsn,
                contenders,
                sizes.end_to_end_jobs,
                procs,
                sizes.producer_connections,
                raw_batch,
                sizes.end_to_end_repeats,
                pgqueuer,
            )
            if pgqueuer_skipped:
                out["endtoend"]["pgqueuer"] = {"skipped": pgqueuer_skipped}

        if "latency" in options.sections:
            log(
                f"latency: {sizes.latency_probes} probes of Tenure idle, each beside one of the "
                "machine's floor, then of Tenure at half of peak load"
            )
            await sections.reset(dsn)
            peak = out["throughput"]["tenure_n"]["jobs_per_second"]
            async with Client(dsn, schema=sections.SCHEMA) as client:
                # The floor's probes go between Tenure's idle ones, so both meet the same machine.
                async with floor.FloorProber(dsn) as prober:
                    idle = await sections.latency(
                        contenders.tenure(dsn, 1),
                        options.out_dir / "probe-tenure-idle.txt",
                        sections.tenure_sender(client),
                        sizes.latency_probes,
                        floor=prober,
                    )
                floor_figures = idle.pop("floor")
                loaded = await sections.latency(
                    contenders.tenure(dsn, procs),
                    options.out_dir / "probe-tenure-loaded.txt",
                    sections.tenure_sender(client),
                    sizes.latency_probes,
                    background=sections.tenure_producer(client, peak / 2),
                )
            # Jobs still queued when the probes were done: above zero, the load was more than the
            # workers could take (the producer shares the machine), and latency is queueing time.
            async with await connect(dsn) as conn:
                left = await TENURE_WATCH.count(conn)
            out["latency"] = {
                "floor": floor_figures,
                "idle": idle,
                "half_load": loaded | {"load_jobs_per_second": round(peak / 2), "unfinished_at_end": left},
            }

        if "backlog" in options.sections:
            small = options.claim_batch * 5
            log(
                f"backlog: claim time at {small} pending, then {list(sizes.backlogs)}, "
                "then with a snapshot held"
            )
            await sections.reset(dsn)
            await sections.load(dsn, small)
            out["backlog"] = {
                "small_queue": {
                    "pending": small,
                    "claim_ms": await sections.claim_time_ms(dsn, options.claim_batch, sizes.claim_samples),
                },
                "levels": [
                    await sections.backlog(
                        dsn,
                        contenders,
                        n,
                        procs,
                        None if sizes.drain_largest and n == max(sizes.backlogs) else sizes.backlog_window,
                        sizes.claim_samples,
                    )
                    for n in sizes.backlogs
                ],
            }
            held = sizes.backlogs[1] if len(sizes.backlogs) > 1 else sizes.backlogs[0]
            out["backlog"]["snapshot_held"] = await sections.backlog_with_snapshot(
                dsn, contenders, held, procs, sizes.snapshot_window, sizes.claim_samples
            )

        if "recovery" in options.sections:
            log(f"recovery: {sizes.recovery_jobs} expired leases")
            out["recovery"] = await sections.recovery(dsn, sizes.recovery_jobs)

        if "scheduled" in options.sections:
            log(f"scheduled: claim time with {sizes.not_yet_due} jobs not yet due, then their promotion")
            out["scheduled"] = await waiting.not_yet_due(
                dsn,
                await dbs.create("due_only", migrated=True),
                options.claim_batch,
                sizes.not_yet_due,
                sizes.claim_samples,
            )

        if "fairness" in options.sections:
            log(f"fairness: WAL per waiting job, {sizes.waiting} waiting through a simulated hour")
            out["fairness"] = await waiting.fairness_cost(
                dsn, options.claim_batch, sizes.waiting, sizes.fairness_step, sizes.claim_samples
            )
        if "waits" in options.sections:
            log(
                f"waits: {sizes.latency_probes} probes of the machine's floor, {sizes.signal_probes} jobs "
                "each resumed by a signal, then claim time and the deadline pass with "
                f"{sizes.waiting_for_signals:,} jobs waiting for signals"
            )
            out["waits"] = await waits.waits(
                dsn,
                contenders,
                signal_probes=sizes.signal_probes,
                waiting=sizes.waiting_for_signals,
                floor_probes=sizes.latency_probes,
                claim_samples=sizes.claim_samples,
                out_dir=options.out_dir,
            )
        if "unique" in options.sections:
            log(f"unique: {sizes.unique_enqueues} single enqueues of each kind, plain and keyed")
            out["unique"] = await enqueue.unique_cost(dsn, sizes.unique_enqueues)
        if "limits" in options.sections:
            log(f"limits: claim-and-complete of {sizes.limit_jobs} jobs, unlimited and limited")
            out["limits"] = await limits.limit_cost(dsn, sizes.limit_jobs, options.claim_batch)

        if "workflows" in options.sections:
            log(
                f"workflows: {sizes.workflow_steps} plain jobs and steps of chains claimed and completed, "
                f"then a fan-in of {sizes.fan_in}"
            )
            out["workflows"] = await workflows.workflows(
                dsn, sizes.workflow_steps, sizes.fan_in, sizes.fan_out
            )
    finally:
        await dbs.drop_all()
    result["meta"]["seconds"] = round(time.monotonic() - started, 1)
    result["rows"] = figure_rows(result)
    result["targets"] = targets(result)
    if options.show_table:
        print_table(result)
    (options.out_dir / "bench.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    result["chart"] = chart(result, options.out_dir / "bench.png")
    (options.out_dir / "bench.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def _peer_skipped(name: str, with_peers: bool) -> str:
    """Why a peer's run outside the peers section is skipped ("" when it runs)."""
    if not with_peers:
        return "peers skipped (--no-peers)"
    return "" if peers.installed(name) else NOT_INSTALLED


async def _peer_latency(
    name: str, dsn: str, contenders: sections.Contenders, probes: int, out_dir: Path
) -> dict[str, Any]:
    group = contenders.peer(name, dsn, 1)
    path = out_dir / f"probe-{name}-idle.txt"
    if name == "pgqueuer":
        async with peers.pgqueuer_session(dsn) as (queries, _):

            async def send(sent: float) -> None:
                await peers.pgqueuer_probe(queries, sent)

            return await sections.latency(group, path, send, probes)
    app = peers.procrastinate_app(dsn)
    async with app.open_async():

        async def defer(sent: float) -> None:
            await app.tasks["probe"].defer_async(sent=sent)

        return await sections.latency(group, path, defer, probes)


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _load() -> list[float]:
    import os

    return [round(x, 2) for x in os.getloadavg()]
