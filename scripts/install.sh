#!/usr/bin/env bash
# Everything the tests need on a fresh machine: the system packages (Chromium for the browser
# tests, PgBouncer and pg_auto_failover for the scale-out tests, the soak's network and clock
# tools; see install-system-deps.sh), then Tenure itself with its development extras. Safe to
# run again. A library user needs none of this: `pip install tenure`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-system-deps.sh
pip install -q -e '.[dev]'
