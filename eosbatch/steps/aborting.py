"""Abort: a batch not committed gives its ranges back (offsets stay, so they are planned again)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from eosbatch.context import Context, quiet
from eosbatch.ledger import cleanup, lanes, sinks, store
from eosbatch.ledger.exceptions import OffsetMismatch, RangeConflict
from eosbatch.pipeline import Pipeline
from eosbatch.protocol.states import ABORTABLE


def abort_in(cur: store.Cursor, pipeline: Pipeline, batch: store.Batch, reason: str) -> store.Batch:
    """Abort `batch` in the caller's transaction: mark it so and drop its staged rows."""
    batch = store.set_state(cur, batch, "aborted", error=reason[:2000])
    cleanup.delete_staging(cur, batch.id, sinks.stage_table(pipeline))
    return batch


def abort(ctx: Context, batch_id: int | None = None, reason: str = "aborted", dry_run: bool = False) -> list[int]:
    """Abort the given batch, or every unfinished one: offsets stay, so the same ranges are planned again.
    A committed batch is never aborted: it can only be rolled forward. `dry_run`: the same choice, logged
    with "would", and nothing changed."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    aborted: list[int] = []
    with store.transaction(settings, dry_run=dry_run) as cur:
        lanes.lock_pipeline(cur, pipeline.name)
        batches = [store.get_batch(cur, batch_id)] if batch_id is not None else store.open_batches(cur, pipeline.name)
        for batch in batches:
            if batch.state in ABORTABLE:
                if dry_run:
                    log(f"batch {batch.id}: {batch.state}, would be aborted; its ranges would be planned again: "
                        f"{' '.join(map(str, batch.ranges)) or '-'}")
                else:
                    abort_in(cur, pipeline, batch, reason)
                    log(f"batch {batch.id}: aborted ({reason})")
                aborted.append(batch.id)
            elif batch.state == "committed":
                log(f"batch {batch.id}: committed, so not aborted; the next run publishes it")
    return aborted


@contextlib.contextmanager
def aborted_on_failure(ctx: Context, batch_id: int) -> Iterator[None]:
    """Around a batch's steps up to its commit: any failure aborts the batch (its ranges are planned again)
    and is raised. A commit that refused the batch (offsets moved, a range overlap) has aborted it itself."""
    try:
        yield
    except (OffsetMismatch, RangeConflict):
        raise
    except Exception as exc:
        abort(ctx.logging_to(quiet), batch_id, reason=f"{type(exc).__name__}: {exc}")
        raise
