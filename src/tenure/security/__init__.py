"""Least-privilege roles for a Tenure schema: producer, worker, admin (`tenure roles`)."""
