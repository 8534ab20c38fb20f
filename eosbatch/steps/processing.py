"""Process: stage a planned batch on the Spark engine."""

from __future__ import annotations

from eosbatch import engine
from eosbatch.context import Context
from eosbatch.exceptions import EosbatchError
from eosbatch.ledger import store


def process(ctx: Context, batch_id: int) -> None:
    """Stage a planned batch on the Spark engine (eosbatch.engine); it marks the batch staged."""
    settings, log = ctx.settings, ctx.log
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
    if batch.state != "planned":
        log(f"batch {batch_id}: already {batch.state}; nothing to process")
        return
    try:
        counts = engine.process(ctx, batch_id)
    except EosbatchError:
        with store.transaction(settings) as cur:
            now = store.get_batch(cur, batch_id)
        if now.state != "staged":
            raise
        # Another driver of this batch (a task retried while the killed task's driver lived on) staged it
        # first; its rows and writers are recorded (the commit still checks the epoch): done, not failed.
        log(f"batch {batch_id}: staged by another attempt while this one ran; nothing more to process")
        return
    if counts is not None and engine.kind(settings) == "submit":  # a Connect driver logged it here already
        log(f"batch {batch_id}: read {counts['records_read']} records, staged {counts['sink_rows_staged']} rows "
            f"and {counts['dead_letters']} dead letters")
