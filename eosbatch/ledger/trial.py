"""The commit's sink statements tried on a staged batch and rolled back: what they cost, nothing changed
(the benchmark's durability cost, bench/one_batch.py)."""

from __future__ import annotations

import time
from typing import NamedTuple

from eosbatch.config import Settings
from eosbatch.ledger import sinks, store
from eosbatch.pipeline import Pipeline


class Trial(NamedTuple):
    staged: int      # the batch's staged sink rows
    seconds: float


def rolled_back_move(settings: Settings, pipeline: Pipeline, batch_id: int, durable: bool) -> Trial:
    """Move the staged batch into the sink, timed, in a transaction then rolled back. `durable`: as the
    commit does now, the staged-count check first and the outbox written too; otherwise the upsert alone."""
    connection = store.connect(settings)
    try:
        with connection.cursor() as cur:
            batch = store.get_batch(cur, batch_id)
            started = time.perf_counter()
            if durable:
                missing = sinks.missing_staged(cur, pipeline, batch)
                assert not missing, f"batch {batch_id}: staged rows missing: {missing}"
            sinks.move_to_sink(cur, pipeline, batch, with_outbox=durable)
            seconds = time.perf_counter() - started
        connection.rollback()
    finally:
        connection.close()
    return Trial(sum((batch.writer_counts("sink") or {}).values()), seconds)
