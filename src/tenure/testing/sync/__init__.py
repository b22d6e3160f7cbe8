"""Blocking twins generated from async sources (tools/async_to_sync.py)."""
