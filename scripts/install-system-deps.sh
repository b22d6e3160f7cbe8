#!/usr/bin/env bash
# System packages the tests use, installed only when missing. The fault soak (`tenure soak`, tests/soak):
#   iproute2  - network namespaces and veth pairs (a worker host on its own network)
#   iptables  - the partition and packet-loss faults (the kernel here may lack tc netem)
#   faketime  - libfaketime, for the clock-skew fault
# and the dashboard's browser tests (tests/dashboard/test_dashboard_browser.py) use:
#   chromium, chromium-driver - headless Chromium driven by Selenium, from Debian (no browser download)
# the scale-out tests (tests/scaleout) use:
#   pgbouncer - the connection pooler, run in transaction mode in front of the test server
# and the failover tests (tests/scaleout/failover):
#   postgresql-15-auto-failover - the pgautofailover extension and pg_autoctl (/usr/bin), the
#                                 monitor, primary and synchronous standby they fail over
# Safe to run again; needs root (or sudo). Without the soak's packages, the soak fails its check
# that every kind of fault ran, naming what is missing; without Chromium, the browser tests fail;
# without pgbouncer or pg_autoctl, the scale-out tests fail naming it.
set -euo pipefail

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || missing+=(faketime)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v pg_autoctl >/dev/null 2>&1 || missing+=(postgresql-15-auto-failover)

if [ "${#missing[@]}" -eq 0 ]; then
    echo "system dependencies present"
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
echo "installing: ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
