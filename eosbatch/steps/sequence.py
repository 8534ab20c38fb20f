"""The declared step sequence (eosbatch.protocol.sequence) bound to the step functions, each called the same
way: (context, batch id, what the step before returned)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from eosbatch.context import Context
from eosbatch.protocol.sequence import Step
from eosbatch.steps.aborting import aborted_on_failure
from eosbatch.steps.committing import commit
from eosbatch.steps.early import commit_and_publish
from eosbatch.steps.processing import process
from eosbatch.steps.publishing import finalize, publish_to_kafka

Call = Callable[[Context, int, Any], Any]

CALLS: dict[str, Call] = {
    "process": lambda ctx, batch_id, _: process(ctx, batch_id),
    "commit": lambda ctx, batch_id, _: commit(ctx, batch_id),
    "publish": lambda ctx, batch_id, _: publish_to_kafka(ctx, batch_id),
    "finalize": lambda ctx, batch_id, produced: finalize(ctx, batch_id, produced),
    "commit_and_publish": lambda ctx, batch_id, _: commit_and_publish(ctx, batch_id),
}


def call(step: Step, ctx: Context, batch_id: int, previous: Any = None) -> Any:
    """One step of a planned batch; `previous` is what the step before it returned. Measured: its duration, and
    a terminal error (eosbatch.metrics)."""
    with ctx.metrics.step(ctx.pipeline.name, step.name):
        return CALLS[step.name](ctx, batch_id, previous if step.takes_previous else None)


def run_in_order(ctx: Context, batch_id: int, steps: Iterable[Step], check_lease: Callable[[], None] | None = None
                 ) -> Any:
    """Run `steps` over one planned batch in order, each given what the one before returned; an abortable
    step's failure aborts the batch. `check_lease` runs before each step after the first that needs the lane's
    lease held (LaneLost stops the batch there; before an abortable step, it is aborted). What the last returned."""
    result: Any = None
    for index, step in enumerate(steps):
        with aborted_on_failure(ctx, batch_id) if step.abortable else contextlib.nullcontext():
            if check_lease is not None and index and step.lease != "none":
                check_lease()
            result = call(step, ctx, batch_id, result)
    return result
