"""The process step's driver: read the batch's ranges, parse, transform, stage, mark the batch staged."""

from __future__ import annotations

import time
import uuid
from typing import Any

from eosbatch import config, faults, registry
from eosbatch.exceptions import TerminalError
from eosbatch.ledger import sinks, store
from eosbatch.pipeline import Pipeline
from eosbatch.spark import reader, schema
from eosbatch.spark.staging import WriterResult, copy_partition


def _session(master: str) -> Any:
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(master).appName("eosbatch")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .getOrCreate())


def _dead_letter_row(row: Any) -> tuple[Any, ...] | None:
    error = row[reader.ERROR_COLUMN]
    if error is None:
        return None
    return (row["topic"], row["partition"], row["offset"], row["key"], row["value"], error)


def process(pipeline_name: str, batch_id: int, log: Any = print) -> dict[str, int]:
    settings = config.load()
    pipeline: Pipeline = registry.get(pipeline_name)
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
        store.check_epoch(cur, batch)
    if batch.state != "planned":
        raise TerminalError(f"batch {batch_id} is {batch.state}; only a planned batch can be processed")
    started = time.monotonic()
    spark = _session(settings.spark_master)
    nonce = uuid.uuid4().hex[:12]  # this run's writers; a retried driver gets new tags
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    raw = reader.read_ranges(spark, settings, list(batch.ranges))
    parsed = reader.parse(raw, pipeline.source).persist(StorageLevel.MEMORY_AND_DISK)
    dsn = settings.psycopg_dsn
    try:
        records_read = parsed.count()
        # Only the malformed records cross into Python: the filter runs in the JVM (a Python pass over every
        # record just to find the few bad ones took a third of the step).
        dead = (parsed.where(F.col(reader.ERROR_COLUMN).isNotNull())
                .select("topic", "partition", "offset", "key", "value", reader.ERROR_COLUMN).rdd
                .mapPartitions(copy_partition(dsn, "eosbatch.staged_dead_letters", nonce, batch_id,
                                              _dead_letter_row)).collect())
        good = parsed.where(F.col(reader.ERROR_COLUMN).isNull()).drop(reader.ERROR_COLUMN)
        result = pipeline.transform(good)
        columns = schema.columns(result.schema)
        with store.transaction(settings) as cur:
            sinks.ensure_tables(cur, pipeline, columns)
            names = [c.name for c in columns]
            stage_sql = sinks.stage_copy_target(pipeline, names).as_string(cur.connection)
        staged = result.rdd.mapPartitions(copy_partition(
            dsn, stage_sql, nonce, batch_id, lambda row: tuple(row[n] for n in names))).collect()
    finally:
        parsed.unpersist()
        spark.stop()
    writers = {"sink": _counts(staged), "dead_letters": _counts(dead), "columns": names}
    counts = {"records_read": records_read, "sink_rows_staged": sum(r.rows for r in staged),
              "dead_letters": sum(r.rows for r in dead)}
    faults.point("process.before_staged")
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id, lock=True)
        store.check_epoch(cur, batch)
        store.set_state(cur, batch, "staged", writers=writers, records_read=counts["records_read"],
                        dead_letters=counts["dead_letters"])
    log(f"batch {batch_id}: read {counts['records_read']} records, staged {counts['sink_rows_staged']} rows "
        f"and {counts['dead_letters']} dead letters in {time.monotonic() - started:.1f}s")
    faults.point("process.after_staged")
    return counts


def _counts(results: list[WriterResult]) -> dict[str, int]:
    """The successful attempts that wrote rows, with their counts: what the commit checks staging against."""
    return {r.writer: r.rows for r in sorted(results) if r.rows > 0}
