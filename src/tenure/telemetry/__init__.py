"""Tracing and the logging context of a job."""
