"""What the faults of one soak run reach: its database, the lease its workers hold, how their
sessions are named, the roles they and the producer run as, and the operator at the dashboard."""

from __future__ import annotations

from dataclasses import dataclass

from tenure.lab.soak.operator import DashboardOperator
from tenure.lab.soak.roles import SoakRole


@dataclass(frozen=True)
class FaultScope:
    dsn: str
    schema: str
    lease: float
    #: The database's name (the read-only fault switches it); None: not known.
    database: str | None = None
    #: What the application_name of every session of this run's workers starts with.
    worker_prefix: str = "soak"
    #: The LOGIN role the workers run as (the revoke fault takes its grant away).
    role: SoakRole | None = None
    #: The producer's LOGIN role, as which the worst rows go in.
    producer: SoakRole | None = None
    operator: DashboardOperator | None = None

    @property
    def roles(self) -> list[SoakRole]:
        """The run's own roles, which an upgrade grants what the new versions bring."""
        return [r for r in (self.role, self.producer) if r is not None]
