"""The process step's driver: read the batch's ranges, parse, transform, stage, mark the batch staged."""

from __future__ import annotations

import time
import uuid
from typing import Any, NamedTuple

from eosbatch import config, faults, registry
from eosbatch.exceptions import TerminalError
from eosbatch.ledger import sinks, store
from eosbatch.pipeline import Pipeline
from eosbatch.spark import reader, schema
from eosbatch.spark.session import on_own_session
from eosbatch.spark.staging import (
    DEAD_ROWS,
    DEAD_WRITER,
    RESULT_SCHEMA,
    StageTarget,
    WriterResult,
    dead_writers,
    split_dead_letters,
    stage_partition,
)


def process(pipeline_name: str, batch_id: int, log: Any = print) -> dict[str, int]:
    """The spark-submit engine's driver: a session of its own for this one batch."""
    return on_own_session("eosbatch", process_on, pipeline_name, batch_id, log, faults.carried())


def process_on(spark: Any, pipeline_name: str, batch_id: int, log: Any, fault: dict[str, str]) -> dict[str, int]:
    """Stage one planned batch on `spark` (a classic or a Spark Connect session) and mark it staged.

    One Spark action, one pass over the ranges: malformed records are staged as dead letters on the way
    in, the transform's rows at the end; the records read and the dead letters' writers come back through
    an observation, the sink's writers as the action's rows. Only tags and counts reach the driver."""
    settings = config.load()
    pipeline: Pipeline = registry.get(pipeline_name)
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
        store.check_epoch(cur, batch)
    if batch.state != "planned":
        raise TerminalError(f"batch {batch_id} is {batch.state}; only a planned batch can be processed")
    started = time.monotonic()
    nonce = uuid.uuid4().hex[:12]  # this run's writers; a retried driver gets new tags
    parsed = reader.parse(reader.read_ranges(spark, settings, list(batch.ranges), pipeline.name), pipeline.source)
    good = _split_dead_letters(parsed, reader.records_schema(pipeline.source), settings.psycopg_dsn, nonce, batch_id)
    result = pipeline.transform(good.rows)
    if settings.staging_writers:
        # Each staging task holds a PostgreSQL connection: at most this many, whatever the partition count
        # (a coalesce, so without a shuffle; it narrows the stages before it as well).
        result = result.coalesce(settings.staging_writers)
    columns = schema.columns(result.schema)
    names = [c.name for c in columns]
    with store.transaction(settings) as cur:
        sinks.ensure_tables(cur, pipeline, columns)
        sink_target = StageTarget("sink", sinks.stage_copy_target(pipeline, names).as_string(cur.connection))
    staged = (result.mapInArrow(stage_partition(settings.psycopg_dsn, sink_target, nonce, batch_id, fault),
                                RESULT_SCHEMA)
              .collect())
    sink_writers = [WriterResult(r["writer"], r["rows"]) for r in staged]
    observed = good.observation.get
    dead = dead_writers(observed["dead"])
    writers = {"sink": _counts(sink_writers), "dead_letters": {w: n for w, n in sorted(dead.items()) if n > 0},
               "columns": names}
    counts = {"records_read": int(observed["rows"]) + sum(dead.values()),
              "sink_rows_staged": sum(r.rows for r in sink_writers), "dead_letters": sum(dead.values())}
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


class _Good(NamedTuple):
    rows: Any         # DataFrame: the well-formed records, for the transform
    observation: Any  # Observation: their count ("rows") and the dead letters' writers ("dead")


def _split_dead_letters(parsed: Any, records: Any, dsn: str, nonce: str, batch_id: int) -> _Good:
    """The records (of schema `records`) minus the malformed ones, which are staged on the way (one pass)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    kept = records.fields
    split_schema = StructType([*(StructField(f.name, f.dataType, True) for f in kept),
                               StructField(DEAD_WRITER, StringType(), True), StructField(DEAD_ROWS, LongType(), True)])
    split = parsed.mapInArrow(split_dead_letters(dsn, reader.ERROR_COLUMN, nonce, batch_id), split_schema)
    report = F.col(DEAD_WRITER).isNotNull()
    observation = Observation(f"eosbatch_{nonce}")
    rows = (split.observe(observation,
                          F.count(F.when(~report, F.lit(1))).alias("rows"),
                          # a string: Spark Connect (4.0) cannot return an array as an observed metric
                          F.concat_ws(";", F.collect_list(F.when(report, F.concat_ws(
                              "=", F.col(DEAD_WRITER), F.col(DEAD_ROWS).cast("string"))))).alias("dead"))
            .where(~report).drop(DEAD_WRITER, DEAD_ROWS))
    return _Good(rows, observation)


def _counts(results: list[WriterResult]) -> dict[str, int]:
    """The successful attempts that wrote rows, with their counts: what the commit checks staging against
    (a task that staged more than once, over several parent partitions, adds up)."""
    counts: dict[str, int] = {}
    for r in sorted(results):
        counts[r.writer] = counts.get(r.writer, 0) + r.rows
    return {writer: rows for writer, rows in counts.items() if rows > 0}
