"""`tenure worker`'s claim batch: parsed as a positive count, defaulting to the worker's own."""

from __future__ import annotations

import pytest

from tenure.ops.cli import build_parser
from tenure.worker.options import WorkerOptions


def test_worker_claim_batch_defaults_to_the_workers_and_refuses_zero() -> None:
    """`--claim-batch 200` is 200, no flag is WorkerOptions' default, and 0 exits with usage."""
    parser = build_parser()
    assert parser.parse_args(["worker", "app", "--claim-batch", "200"]).claim_batch == 200
    assert parser.parse_args(["worker", "app"]).claim_batch == WorkerOptions.claim_batch
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["worker", "app", "--claim-batch", "0"])
    assert info.value.code == 2
