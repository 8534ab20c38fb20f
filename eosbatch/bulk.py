"""Moving a million records through Python (publish streams the outbox from PostgreSQL to Kafka).

Every record makes a few tuples and lists. Python's cyclic garbage collector, triggered by allocations,
kept scanning them: 3.5 of the 7.5 seconds it took to read a million outbox records, and 4 of the 13 s it
took to read and produce them. Those objects form no cycles (reference counting frees each one as soon as
it is produced), so the collector pauses meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for the block (as it was before, after it)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
