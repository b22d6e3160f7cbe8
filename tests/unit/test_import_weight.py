"""What `import tenure` loads: a web process that only enqueues gets no worker module."""

from __future__ import annotations

import subprocess
import sys


def test_import_tenure_loads_no_worker_module() -> None:
    """After `import tenure`, no module of the worker's runtime is loaded; tenure.Worker loads it."""
    probe = (
        "import sys, tenure\n"
        "print(sorted(m for m in sys.modules if m.startswith('tenure.worker')))\n"
        "tenure.Worker\n"
        "print('tenure.worker.worker' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "True"]
