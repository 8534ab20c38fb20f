"""A run of many batches, one after another: each batch is published before the next is planned."""

from __future__ import annotations

import contextlib

from eosbatch import config, steps
from eosbatch import lease as leases
from eosbatch.exceptions import EosbatchError
from eosbatch.ledger import store
from eosbatch.protocol.states import lane
from eosbatch.running import overlapped
from eosbatch.running.summary import RunSummary
from eosbatch.steps import Log, aborted_on_failure
from eosbatch.steps import quiet as _quiet


def run_batch(pipeline_name: str, batch: store.Batch, log: Log = _quiet, owner: str | None = None
              ) -> store.Batch:
    """process -> commit -> publish for one planned batch; aborts it if it fails before the commit.
    The lane's lease (held by `owner`, default this process) is renewed before each step and by a
    heartbeat meanwhile; a runner that finds it lost stops with LaneLost."""
    settings = config.load()
    with leases.Heartbeat(settings, pipeline_name, lane(batch.kind), owner or leases.runner_id()) as lease:
        with aborted_on_failure(pipeline_name, batch.id):
            steps.process(pipeline_name, batch.id, log)
            lease.check()
            if settings.early_publish:
                return steps.commit_and_publish(pipeline_name, batch.id, log)  # a committed batch is never aborted
            steps.commit(pipeline_name, batch.id, log)
        lease.check()
        return steps.publish(pipeline_name, batch.id, log)


def run(pipeline_name: str, max_batches: int | None = None, log: Log = _quiet, overlap: bool | None = None
        ) -> RunSummary:
    """Plan and run batches until caught up (or `max_batches`), holding the regular lane's lease
    throughout, and releasing it at the end so that the next runner need not wait for it to expire.
    `overlap` (default: the EOSBATCH_OVERLAP setting) runs consecutive batches' steps side by side
    (eosbatch.running.overlapped); off, each batch is published before the next is planned."""
    if config.load().overlap if overlap is None else overlap:
        return overlapped.run(pipeline_name, max_batches, log)
    owner = leases.runner_id()
    summary = RunSummary(0, 0, 0, 0, 0)
    try:
        while max_batches is None or summary.batches < max_batches:
            batch = steps.plan(pipeline_name, log, owner)
            if batch is None:
                break
            summary = summary.add(run_batch(pipeline_name, batch, log, owner))
    finally:
        steps.release_publishers()
        with contextlib.suppress(EosbatchError):  # a bad setting was reported by plan already
            leases.release(config.load(), pipeline_name, "regular", owner)
    return summary
