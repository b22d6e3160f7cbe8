"""How a job's wait reads for people, on the command line and on the dashboard alike."""

from __future__ import annotations

from tenure.model.waits import WaitRecord

_HOW = {
    "waiting": "waiting now",
    "signalled": "signalled",
    "timed_out": "timed out",
    "ended": "ended",
    "cancelled": "cancelled with its job",
}


def wait_ending(wait: WaitRecord) -> str:
    """'waiting now', 'signalled', 'timed out', 'ended by <who>' or 'cancelled with its job'."""
    if wait.state == "ended" and wait.ended_by:
        return f"ended by {wait.ended_by}"
    return _HOW.get(wait.state, wait.state)
