"""Who an operator's act is recorded as."""

from __future__ import annotations

import getpass
import socket


def default_actor() -> str:
    """Who an operator's act is recorded as when the caller does not say: user@host."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "operator"
    return f"{user}@{socket.gethostname()}"[:200]
