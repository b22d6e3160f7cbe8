"""`tenure demo`: the bank under real crashes."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_demo(args: argparse.Namespace) -> int:
    from tenure.ops.demo.run import run_demo

    return run_demo(args)


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("demo", parents=[common], help="bank transfers under real crashes, then a report")
    p.add_argument("--transfers", type=int, default=3000)
    p.add_argument("--accounts", type=int, default=50)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--lease", type=float, default=2.0)
    p.add_argument("--no-faults", action="store_true", help="skip the SIGKILL and SIGSTOP")
    p.add_argument(
        "--database",
        default="tenure_demo",
        help="the demo's own database, dropped and recreated on each run (name must start with tenure_demo)",
    )
    p.add_argument("--concurrency", type=int, default=10, help="jobs in flight per worker")
    p.add_argument("--timeout", type=float, default=120.0, help="give up (and fail) after this many seconds")
    p.add_argument("--seed", type=int, default=None, help="seed for the accounts and transfers")
    p.add_argument("--keep-logs", action="store_true", help="keep the worker logs even when all is well")
    p.set_defaults(handler=cmd_demo)
