"""`tenure worker`'s claim batch and trickle gap: parsed from the command line, defaulting to the
worker's own, and refused with the fix when out of range."""

from __future__ import annotations

import pytest

from tenure.model.errors import ConfigurationError
from tenure.ops.cli import build_parser
from tenure.worker.options import MAX_TRICKLE_GAP, WorkerOptions


def test_worker_claim_batch_defaults_to_the_workers_and_refuses_zero() -> None:
    """`--claim-batch 200` is 200, no flag is WorkerOptions' default, and 0 exits with usage."""
    parser = build_parser()
    assert parser.parse_args(["worker", "app", "--claim-batch", "200"]).claim_batch == 200
    assert parser.parse_args(["worker", "app"]).claim_batch == WorkerOptions.claim_batch
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["worker", "app", "--claim-batch", "0"])
    assert info.value.code == 2


def test_trickle_gap_is_seconds_from_zero_to_its_bound() -> None:
    """`--trickle-gap 0` (claim at every notification) and the bound are taken; a negative gap,
    one past the bound, or a flag are refused, naming the option and its range."""
    parser = build_parser()
    assert parser.parse_args(["worker", "app", "--trickle-gap", "0"]).trickle_gap == 0.0
    assert parser.parse_args(["worker", "app"]).trickle_gap == WorkerOptions.trickle_gap
    assert WorkerOptions(trickle_gap=0).trickle_gap == 0
    assert WorkerOptions(trickle_gap=MAX_TRICKLE_GAP).trickle_gap == MAX_TRICKLE_GAP
    for bad in (-0.01, MAX_TRICKLE_GAP + 0.5, True, "0.02"):
        with pytest.raises(ConfigurationError, match="trickle_gap must be a number of seconds from 0"):
            WorkerOptions(trickle_gap=bad)  # type: ignore[arg-type]
