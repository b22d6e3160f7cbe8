"""The benchmark's CI smoke run: it completes and writes every figure. Never a timed assertion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tenure.lab.bench import peers
from tenure.lab.bench.sizes import SECTIONS

pytestmark = [pytest.mark.slow, pytest.mark.crash]

#: Every target has a line in the targets table (the drain ones once per size).
TARGETS = (
    "drain, each at its best: tenure vs pgqueuer",
    "drain, tenure at its best vs raw SQL claim 100",
    "drain at the run's settings vs raw SQL claim 100",
    "drain, tenure at its best vs the ceiling",
    "end to end (one job per enqueue transaction, workers draining) vs raw SQL",
    "end to end (one job per enqueue transaction, workers draining) vs pgqueuer",
    "idle latency p50 vs the machine's floor",
    "idle latency p99 vs the machine's floor",
    "idle latency p50 below pgqueuer's",
    "idle latency p99 below pgqueuer's",
    "worker CPU per job",
    "server CPU per job",
    "WAL per job",
    "index writes: non-HOT updates per job",
    "index writes: HOT updates per job",
    "drain with 1M pending",
    "claim time with 1M not yet due",
    "signal to handler resumed p50 vs the machine's floor",
    "signal to handler resumed p99 vs the machine's floor",
    "claim time with 1M waiting for signals",
    "deadline pass with 1M waiting, none due: sequential scans",
    "drain with 3 processes, tenure",
    "drain with 3 processes, raw SQL claim 100",
    "COPY enqueue",
)


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return subprocess.run(
        [sys.executable, "-m", "tenure.ops.cli", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_smoke_run_writes_a_complete_result(server_dsn: str, tmp_path: Path) -> None:
    """`tenure bench --smoke` exits 0 and its JSON holds every section (claim time with jobs not yet
    due and the fairness write cost among them), every figure and a baseline, the ceiling's sweep
    at both drain sizes with its best as the ceiling and claim 100 in it, the row writes of the
    drains, the latency floor, PgQueuer's end-to-end run, and a verdict for every target."""
    # 20 slots a process: Procrastinate's pools then hold 42 connections, leaving the shared test
    # server room for the tests running beside this one.
    done = run_cli("--smoke", "--concurrency", "20", "--dsn", server_dsn, "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "bench.json").read_text())

    assert set(SECTIONS) <= set(result["sections"])  # every section the benchmark has
    settings = result["meta"]["server_settings"]
    assert settings["fsync"] == "on" and settings["synchronous_commit"] == "on"
    throughput = result["sections"]["throughput"]
    for key in ("tenure_1", "tenure_n", "raw_1", "raw_n"):
        drained = throughput[key]
        assert drained["jobs"] == throughput["jobs"]
        assert drained["jobs_per_second"] > 0 and drained["peak_rss_mib"] > 0
        # CPU comes in 10 ms clock ticks: a small drain by the raw loop may read as none.
        assert drained["startup_seconds"] > 0 and drained["worker_cpu_us_per_job"] is not None
    sizes = result["meta"]["sizes"]
    assert throughput["sizes"] == sizes["drain_sizes"] and len(sizes["drain_sizes"]) == 2
    for size in sizes["drain_sizes"]:
        at = throughput["by_size"][str(size)]
        sweep = {int(b): r["jobs_per_second"] for b, r in at["ceiling_sweep"].items()}
        assert set(sweep) == set(sizes["ceiling_batches"]) | {result["meta"]["claim_batch"]}
        assert at["ceiling"]["batch"] == max(sweep, key=lambda b: sweep[b])  # the best of the sweep
        assert at["raw_reference"]["batch"] == 100 and 100 in sweep
        assert at["tenure_n"]["jobs"] == size
        # Tenure drains at the run's settings and at each claim batch of its sweep; its best stands.
        tenure_sweep = {(r["claim_batch"], r["concurrency"]): r for r in at["tenure_sweep"].values()}
        assert (result["meta"]["claim_batch"], result["meta"]["concurrency_per_process"]) in tenure_sweep
        assert {(b, 2 * b) for b in sizes["tenure_claim_batches"]} <= set(tenure_sweep)
        best_rate = max(r["jobs_per_second"] for r in tenure_sweep.values())
        assert at["tenure_best"]["jobs_per_second"] == best_rate
        # Every drain claims and completes each job: two updates of its row, at least.
        for drained in (at["tenure_n"], at["raw_reference"]):
            assert drained["non_hot_updates_per_job"] + drained["hot_updates_per_job"] >= 2, drained
    assert throughput["jobs_table"]["indexes"] > throughput["jobs_table"]["partial_indexes"] > 0
    crowd = result["sections"]["contention"]
    assert crowd["processes"] == sizes["contention_processes"] == 3
    assert crowd["tenure"]["jobs"] == crowd["raw"]["jobs"] == crowd["jobs"] == max(sizes["drain_sizes"])
    assert throughput["startup_seconds"]["tenure"] > 0 and throughput["startup_seconds"]["raw"] > 0
    end_to_end = result["sections"]["endtoend"]
    e2e_kinds = ("tenure", "raw", "pgqueuer") if peers.installed("pgqueuer") else ("tenure", "raw")
    if peers.installed("pgqueuer"):
        pgqueuer = result["sections"]["peers"]["pgqueuer"]
        assert end_to_end["pgqueuer_batch"] == pgqueuer["batch"]
        assert pgqueuer["max_concurrent_tasks"] == 2 * pgqueuer["batch"]
    for kind in e2e_kinds:
        assert end_to_end[kind]["jobs"] == end_to_end["jobs"] and end_to_end[kind]["jobs_per_second"] > 0
        # Both test servers run on this machine: every side's CPU per job is read.
        for side in ("producer", "producer_server", "worker", "worker_server"):
            assert end_to_end[kind][f"{side}_cpu_us_per_job"] > 0, (kind, side)
    for name in peers.PEERS:
        peer = result["sections"]["peers"][name]
        if peers.installed(name):
            assert peer["jobs_per_second"] > 0 and peer["idle_latency"]["samples"] > 0
            assert set(peer["by_size"]) == {str(n) for n in sizes["drain_sizes"]}
        else:
            assert "not installed" in peer["skipped"]
    latency = result["sections"]["latency"]
    assert latency["floor"]["samples"] == sizes["latency_probes"] and latency["floor"]["p50_ms"] > 0
    assert result["sections"]["recovery"]["recovered"] == result["sections"]["recovery"]["expired_leases"]
    assert len(result["sections"]["backlog"]["levels"]) == len(result["meta"]["sizes"]["backlogs"])
    scheduled = result["sections"]["scheduled"]
    assert scheduled["not_yet_due"] == result["meta"]["sizes"]["not_yet_due"] == scheduled["promoted"]
    fairness = result["sections"]["fairness"]
    assert fairness["waiting_jobs"] == result["meta"]["sizes"]["waiting"]
    assert fairness["simulated_seconds"] == 3600 and fairness["passes"] > 0

    flows = result["sections"]["workflows"]
    assert flows["drained"] == {
        "plain": flows["steps"],
        "chain": flows["steps"],
        "fan_in": flows["fan_in"] + 1,
    }
    # Every child of the fan-out is released, by the root's completion and the workflow pass.
    assert flows["fan_out_released"] == flows["fan_out"] == sizes["fan_out"]
    assert flows["fan_out_chunks"] > 0

    rows = result["rows"]
    figures = {r["figure"] for r in rows}
    assert {"idle p50, tenure", "idle p99, tenure"} <= figures
    assert any(f.startswith("tenure, N processes, ") for f in figures)
    assert any(f.startswith("claim time, ") and f.endswith(" not yet due") for f in figures)
    assert any(f.startswith("WAL per waiting job") for f in figures)
    for row in rows:
        assert row["value"] is not None, row
        # A baseline of nothing (no HOT update in the raw loop's drain, say) gives no ratio.
        if row["baseline_value"] != 0 and (row["baseline"] != "pgqueuer idle" or peers.installed("pgqueuer")):
            assert row["ratio"] is not None, row
    assert any(f.endswith("(the ceiling)") and f.startswith("raw SQL claim ") for f in figures)

    listed = [t["target"] for t in result["targets"]]
    for name in TARGETS:
        assert any(t.startswith(name) for t in listed), name
    for target in result["targets"]:
        assert target["status"] in ("met", "not met", "not measured", "reported"), target
        needs = [name for name in peers.PEERS if name in target["target"]]
        if "1M" in target["target"]:
            assert target["status"] == "not measured" and target["note"], target  # smoke sizes
        elif all(peers.installed(name) for name in needs):
            assert target["status"] != "not measured", target
    assert "targets met:" in done.stdout
    chart = result["chart"]
    assert chart.startswith("skipped") or Path(chart).stat().st_size > 0


def test_unknown_section_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """An unknown --sections name exits 2 with the valid names, and writes nothing."""
    done = run_cli(
        "--sections",
        "throughput,warp",
        "--dsn",
        "postgresql://nobody@127.0.0.1:1/x",
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 2
    assert "warp" in done.stderr and "throughput" in done.stderr
    assert not (tmp_path / "out").exists()
