"""What each `eosbatch` command does, as plain functions: the CLI only parses arguments and prints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eosbatch import backfill as history
from eosbatch import config, registry, stack, steps
from eosbatch.kafka import offsets
from eosbatch.ledger import migrate, store

Log = Callable[[str], None]


def stack_up(log: Log = print) -> stack.StackInfo:
    info = stack.up(log)
    return info


def stack_env() -> dict[str, str]:
    return stack.status().env()


def db_upgrade(revision: str = "head") -> str | None:
    url = config.load().database_url
    migrate.upgrade(url, revision)
    return migrate.current(url)


def db_downgrade(revision: str) -> str | None:
    url = config.load().database_url
    migrate.downgrade(url, revision)
    return migrate.current(url)


def run(pipeline: str, max_batches: int | None = None, log: Log = print) -> steps.RunSummary:
    return steps.run(pipeline, max_batches=max_batches, log=log)


def verify(pipeline: str, recompute: bool = True, log: Log = print) -> Any:
    from eosbatch.verify import audit

    return audit(pipeline, recompute=recompute, log=log)


def settle_publish(pipeline: str, batch_id: int, republish: bool, log: Log = print) -> steps.store.Batch:
    """The way out of MarkerExpired: the operator looked at the output topic and says what is there."""
    if republish:
        return steps.publish(pipeline, batch_id, log, ignore_expired_marker=True)
    return steps.finalize(pipeline, batch_id, None, log)


def backfill(pipeline: str, ranges: list[str] | None = None, time_from: str | None = None,
             time_to: str | None = None, mode: str = "fill", publish: bool | None = None, dry_run: bool = False,
             log: Log = print, progress: Any = None) -> history.BackfillReport:
    return history.backfill(pipeline, ranges, time_from, time_to, mode, publish, dry_run, log, progress)


def replay(pipeline: str, batch_id: int, log: Log = print) -> history.ReplayReport:
    return history.replay(pipeline, batch_id, log)


def ranges(pipeline: str) -> list[history.PartitionCoverage]:
    return history.coverage(pipeline)


def status(pipeline_name: str, limit: int = 10) -> dict[str, Any]:
    """Recent batches, and per partition: next offset, last stable offset, lag."""
    settings = config.load()
    pipeline = registry.get(pipeline_name)
    bounds = offsets.bounds(settings, pipeline.source.topics)
    with store.transaction(settings) as cur:
        store.lock_pipeline(cur, pipeline.name)
        next_offsets = store.next_offsets(cur, pipeline.name)
        batches = store.recent_batches(cur, pipeline.name, limit)
    partitions = []
    for tp, bound in sorted(bounds.items()):
        next_offset = next_offsets.get(tp)
        partitions.append({"partition": str(tp), "next_offset": next_offset, "log_start": bound.low,
                           "last_stable_offset": bound.stable,
                           "lag": None if next_offset is None else max(0, bound.stable - next_offset)})
    return {"pipeline": pipeline.name, "partitions": partitions, "batches": [
        {"id": b.id, "kind": b.kind, "state": b.state, "ranges": [str(r) for r in b.ranges],
         "records_read": b.records_read, "sink_rows": b.sink_rows, "dead_letters": b.dead_letters,
         "published": b.published_records, "error": b.error, "updated": b.updated_at.isoformat(timespec="seconds")}
        for b in batches]}
