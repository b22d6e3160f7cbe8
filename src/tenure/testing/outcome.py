"""`Ran`: a job run inline, as its outcome left it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tenure.model.jobs import Job


@dataclass(frozen=True)
class Ran:
    """A job run inline, as stored once its outcome was written."""

    job: Job

    @property
    def state(self) -> str:
        """succeeded; pending or scheduled (a retry); dead; cancelled."""
        return str(self.job.state)

    @property
    def result(self) -> Any:
        return self.job.result

    @property
    def error(self) -> str | None:
        """The job's last error as one line, its code first (`NO_TEMPLATE: ...Permanent: the
        template is missing`), or None; `job.last_error` keeps the whole traceback."""
        if self.job.last_error_code is None:
            return None
        lines = [line.strip() for line in (self.job.last_error or "").splitlines() if line.strip()]
        return f"{self.job.last_error_code}: {lines[-1] if lines else ''}"
