"""A run of many batches, one after another: each batch is published before the next is planned."""

from __future__ import annotations

import contextlib

from eosbatch import lease as leases
from eosbatch import steps
from eosbatch.context import Context
from eosbatch.exceptions import EosbatchError
from eosbatch.ledger import sinks, store
from eosbatch.protocol import sequence
from eosbatch.protocol.states import lane
from eosbatch.running import overlapped
from eosbatch.running.summary import RunSummary
from eosbatch.steps import sequence as bound


def run_batch(ctx: Context, batch: store.Batch, owner: str | None = None) -> store.Batch:
    """The declared steps after plan (eosbatch.protocol.sequence: process -> commit -> publish -> finalize)
    for one planned batch; aborts it if it fails before the commit. The lane's lease (held by `owner`, default
    this process) is checked before each step that needs it and renewed by a heartbeat meanwhile; a runner
    that finds it lost stops with LaneLost."""
    settings = ctx.settings
    early = settings.early_publish and sinks.never_early(ctx.pipeline) is None
    with leases.Heartbeat(settings, ctx.pipeline.name, lane(batch.kind), owner or leases.runner_id()) as lease:
        done: store.Batch = bound.run_in_order(ctx, batch.id, sequence.after_plan(early), lease.check)
    return done


def run(ctx: Context, max_batches: int | None = None, overlap: bool | None = None) -> RunSummary:
    """Plan and run batches until caught up (or `max_batches`), holding the regular lane's lease
    throughout, and releasing it at the end so that the next runner need not wait for it to expire.
    `overlap` (default: the EOSBATCH_OVERLAP setting) runs consecutive batches' steps side by side
    (eosbatch.running.overlapped); off, each batch is published before the next is planned."""
    if ctx.settings.overlap if overlap is None else overlap:
        return overlapped.run(ctx, max_batches)
    owner = leases.runner_id()
    why_not = sinks.never_early(ctx.pipeline) if ctx.settings.early_publish else None
    summary = RunSummary(0, 0, 0, 0, 0)
    try:
        while max_batches is None or summary.batches < max_batches:
            batch = steps.plan(ctx, owner)
            if batch is None:
                break
            if why_not and not summary.batches:  # once a run, and only when it runs a batch
                ctx.log(f"not published early ({why_not}): each batch commits, then publishes from the outbox")
            summary = summary.add(run_batch(ctx, batch, owner))
    finally:
        steps.release_publishers()
        with contextlib.suppress(EosbatchError):  # a bad setting was reported by plan already
            leases.release(ctx.settings, ctx.pipeline.name, "regular", owner)
    return summary
