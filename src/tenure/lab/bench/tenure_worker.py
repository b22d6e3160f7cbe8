"""A real Tenure worker process for the benchmark: `python -m tenure.lab.bench.tenure_worker`.

It is the runtime `tenure worker` runs (Worker.run with signal handling), with three tasks: a
no-op, a latency probe, and a probe that waits for a signal (the waits section). Its own entry
point only so the claim batch can be set, and so that `--profile FILE` can run it under cProfile
(CPU time), from SIGUSR1 to the end (bench/profile.py sends the signal when the start gate opens,
so that start-up is left out)."""

from __future__ import annotations

import argparse
import cProfile
import signal
import time

from tenure import JobContext, Tenure, WorkerOptions
from tenure.lab.bench import probe
from tenure.lab.bench.procs import process_dsn
from tenure.worker.event_loop import run_on

QUEUE = "bench"
#: The signal probe's wait ends long after any run of the section: only a signal ends it.
SIGNAL_PROBE_TIMEOUT = 3600.0
app = Tenure(schema="tenure")


async def noop(ctx: JobContext) -> None:
    """Does nothing: the benchmark measures the queue, not the work."""


async def probe_task(ctx: JobContext, sent: float) -> None:
    probe.record(sent)


async def signal_probe(ctx: JobContext, key: str) -> None:
    """Waits for a signal to `key`, which carries its sender's clock. The first run goes to wait;
    the run the signal resumes gets past the wait and records at once the time since the sender's
    clock reading, and the time from that reading to this run's start."""
    started = time.time()
    answer = await ctx.wait_for(key, timeout=SIGNAL_PROBE_TIMEOUT)
    if answer.signalled:
        sent = float(answer.payload["sent"])
        # The start first: once the resumption is in its file, the section reads both.
        probe.record(sent, at=started, file_env=probe.STARTED_FILE_ENV)
        probe.record(sent)


app.registry.register(noop, name="noop", queue=QUEUE)
app.registry.register(probe_task, name="probe", queue=QUEUE)
app.registry.register(signal_probe, name="signal_probe", queue=QUEUE)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--claim-batch", type=int, default=WorkerOptions().claim_batch)
    parser.add_argument("--profile", default=None, help="write cProfile stats here, from SIGUSR1 on")
    args = parser.parse_args()
    app.dsn = process_dsn(args.dsn)
    options = WorkerOptions(queues=[QUEUE], concurrency=args.concurrency, claim_batch=args.claim_batch)
    profiler = cProfile.Profile(time.process_time) if args.profile else None
    if profiler is not None:
        signal.signal(signal.SIGUSR1, lambda _signum, _frame: profiler.enable())
    run_on(None, app.worker(options).run(handle_signals=True))
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)


if __name__ == "__main__":
    main()
