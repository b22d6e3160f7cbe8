"""The worker: claim, run with heartbeats, complete with fenced writes, recover expired leases."""
