"""`manage.py tenure_worker`: run a worker for the project's Tenure app, with Django set up, so
handlers may use the ORM (sync handlers: they run in threads)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console

from tenure.contrib.django.configured import tenure_app, tenure_dsn
from tenure.contrib.django.settings import tenure_settings
from tenure.model.errors import TenureError
from tenure.ops.cli.banner import run_announced, stop_summary
from tenure.ops.cli.worker import parse_queues
from tenure.worker.options import WorkerOptions


class Command(BaseCommand):
    help = "Run a Tenure worker for settings.TENURE['APP']; SIGTERM or Ctrl-C stops it gracefully."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues", default=None, help="comma-separated queues, optionally weighted: a=3,b=1"
        )
        parser.add_argument("--concurrency", type=int, default=10)
        parser.add_argument("--lease", type=float, default=30.0, help="lease seconds (renewed on progress)")
        parser.add_argument(
            "--max-runtime", type=float, default=3600.0, help="hard limit per attempt, seconds"
        )
        parser.add_argument("--poll-interval", type=float, default=1.0)
        parser.add_argument("--grace", type=float, default=10.0, help="seconds running jobs get at shutdown")
        parser.add_argument("--no-listen", action="store_true", help="poll only, no LISTEN/NOTIFY")
        parser.add_argument("--worker-id", default=None)
        parser.add_argument(
            "--database", default=None, help="the Django database alias (default: TENURE['DATABASE'])"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            code = self._run(options)
        except TenureError as exc:
            raise CommandError(str(exc)) from None
        if code:
            raise CommandError("the worker stopped because a critical service kept failing", returncode=code)

    def _run(self, options: dict[str, Any]) -> int:
        app = tenure_app()
        app.dsn = dsn = tenure_dsn(options["database"])
        queues, weights = parse_queues(options["queues"])
        worker = app.worker(
            WorkerOptions(
                queues=queues,
                queue_weights=weights,
                concurrency=options["concurrency"],
                lease_seconds=options["lease"],
                max_runtime_seconds=options["max_runtime"],
                poll_interval=options["poll_interval"],
                shutdown_grace=options["grace"],
                listen=not options["no_listen"],
                **({"worker_id": options["worker_id"]} if options["worker_id"] else {}),
            )
        )
        console = Console(stderr=True)
        started = time.monotonic()
        stats = asyncio.run(run_announced(console, worker, tenure_settings().app, dsn))
        stop_summary(console, worker, stats, started)
        if worker.failure:
            console.print(f"worker stopped: {worker.failure}", markup=False, highlight=False)
        return 1 if worker.failure else 0
