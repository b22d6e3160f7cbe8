"""Fixtures of the operations tests (metrics, health checks, dead jobs, retention, logs)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # for _ops
