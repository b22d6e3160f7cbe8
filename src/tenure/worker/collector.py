"""Python's cyclic garbage collector in a process that a worker owns.

A worker claims jobs in batches, and a claim of a hundred jobs makes thousands of container
objects at once: each job's execution record, task, coroutine, context and row. They die by
reference counting when their job ends. The collector, though, runs a collection of its youngest
generation every 700 containers made and not yet freed (Python's default), so each batch set off
several collections, each walking objects that were all still alive, and each moving them to an
older generation whose own collections walked them again. On a two-process drain of 50,000
no-op jobs that was about 670 young and 60 middle collections in each process: 6-7 us of worker
CPU a job, a sixth of the worker's CPU (docs/performance.md, the nineteenth round).

A worker that owns its process (`Worker.run(handle_signals=True)`, which `tenure worker` runs)
raises the youngest generation's threshold above a batch's burst for as long as it runs, so a
batch's objects are gone before the collector looks at them. Garbage held in reference cycles is
still collected, a few thousand allocations later. A worker run inside another program
(`handle_signals` left false) leaves that program's collector as it is."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: The youngest generation's threshold while a worker owns the process: above the containers a
#: claim of several hundred jobs makes at once. 10,000 cut the collections of that drain from 670
#: to about 10 in each process.
YOUNG_THRESHOLD = 10_000


@contextmanager
def young_generation_widened() -> Iterator[None]:
    """The youngest generation's threshold raised to YOUNG_THRESHOLD inside the block, and put
    back as it was after it. A threshold already higher is kept, and so is 0 (collection off)."""
    before = gc.get_threshold()
    widened = 0 < before[0] < YOUNG_THRESHOLD
    if widened:
        gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        # Put back unless something else has set its own threshold since.
        if widened and gc.get_threshold()[0] == YOUNG_THRESHOLD:
            gc.set_threshold(*before)
