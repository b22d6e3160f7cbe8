"""Fixtures of the failover tests: one pg_auto_failover cluster for the module, torn down at its
end whatever the tests' outcome."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from _cluster import FailoverCluster  # noqa: E402


@pytest.fixture(scope="module")
def cluster() -> Iterator[FailoverCluster]:
    """A monitor, a primary and a synchronous standby on loopback ports, run by pg_autoctl."""
    built = FailoverCluster()
    try:
        built.start()
        print(
            f"\nfailover cluster: monitor, primary and synchronous standby up in {built.setup_seconds:.1f}s"
        )
        yield built
    finally:
        built.stop()
