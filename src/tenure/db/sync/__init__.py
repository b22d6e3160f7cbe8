"""Blocking twins generated from their async sources (tools/async_to_sync.py)."""
