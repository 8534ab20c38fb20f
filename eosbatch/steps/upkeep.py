"""The ledger's upkeep after a batch is published: compaction every N commits (EOSBATCH_COMPACT_EVERY)."""

from __future__ import annotations

from eosbatch import config
from eosbatch.exceptions import EosbatchError
from eosbatch.ledger import cleanup, commits, store
from eosbatch.pipeline import Pipeline
from eosbatch.steps.shared import Log

COMPACT_LOCK_TIMEOUT = "5s"  # a long commit of another lane holds the pipeline lock: skip, do not stall


def compact_due(settings: config.Settings, pipeline: Pipeline, commit_seq: int | None, log: Log) -> None:
    """Compact the ledger when the commit just published is an N-th one (EOSBATCH_COMPACT_EVERY)."""
    if settings.compact_every and commit_seq and commit_seq % settings.compact_every == 0:
        _compact(settings, pipeline, commit_seq, log)


def _compact(settings: config.Settings, pipeline: Pipeline, before_seq: int, log: Log) -> None:
    """The ledger's upkeep after a batch is published: its own transaction, so a failure leaves the
    published batch as it is (the next due commit compacts what this one did not). The batch just
    finalized and later ones keep their detail: the task's asset and lineage events read it afterwards."""
    try:
        with store.transaction(settings) as cur:
            commits.limit_lock_wait(cur, COMPACT_LOCK_TIMEOUT)
            done = cleanup.compact(cur, pipeline.name, settings.compact_after_days, before_seq=before_seq)
    except EosbatchError as exc:
        log(f"{pipeline.name}: ledger compaction skipped ({exc}); the next one will do it")
        return
    log(f"{pipeline.name}: ledger compacted: {done.batches} published batches older than "
        f"{settings.compact_after_days:g} days, committed ranges {done.committed_before} -> {done.committed_after}")
