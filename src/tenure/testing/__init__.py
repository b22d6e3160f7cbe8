"""Helpers for an application's own tests, on a real database: assert what was enqueued, run a
job's handler now, inline, and drive a workflow step by step, all without starting a worker.

    async with tenure.testing.Inline(app) as t:
        await place_order(8, "b@c.d")
        [job] = await t.assert_enqueued(send_receipt, order_id=8)
        ran = await t.run_job(job.id)
        assert ran.state == "succeeded"

`SyncInline` is the same without asyncio, for Django, Flask or any blocking test. The pytest
plugin (tenure.testing.plugin, registered by the package) gives each test the app on a schema of
its own, so no worker of the developer's sees the tests' jobs. See docs/testing.md.
"""

from __future__ import annotations

from tenure.testing.inline import Inline
from tenure.testing.isolation import TestSchema
from tenure.testing.outcome import Ran
from tenure.testing.sync.inline import SyncInline

__all__ = ["Inline", "Ran", "SyncInline", "TestSchema"]
