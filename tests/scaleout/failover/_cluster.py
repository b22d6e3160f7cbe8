"""The failover tests' cluster is the one the soak's `failover` topology runs on."""

from __future__ import annotations

from tenure.lab.soak.cluster import FailoverCluster, Node

__all__ = ["FailoverCluster", "Node"]
