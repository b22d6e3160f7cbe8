#!/usr/bin/env bash
# The full benchmark of docs/performance.md, on the embedded server unless TENURE_DSN is set.
# Prints the machine's load before and after: figures taken under load are noisy.
set -euo pipefail
out="${1:-bench-results}"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
tenure bench --full --processes 2 --concurrency 100 --claim-batch 20 --out "$out"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
