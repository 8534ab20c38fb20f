"""The process step's driver: read the batch's ranges, parse, transform, stage, mark the batch staged."""

from __future__ import annotations

import time
import uuid
from typing import Any

from eosbatch import config, faults, registry
from eosbatch.exceptions import TerminalError, TransientError
from eosbatch.ledger import sinks, store
from eosbatch.pipeline import Pipeline
from eosbatch.spark import reader, schema
from eosbatch.spark.session import on_own_session
from eosbatch.spark.staging import DEAD_LETTER_COLUMNS, RESULT_SCHEMA, StageTarget, WriterResult, stage_partition


def process(pipeline_name: str, batch_id: int, log: Any = print) -> dict[str, int]:
    """The spark-submit engine's driver: a session of its own for this one batch."""
    return on_own_session("eosbatch", process_on, pipeline_name, batch_id, log, faults.carried())


def process_on(spark: Any, pipeline_name: str, batch_id: int, log: Any, fault: dict[str, str]) -> dict[str, int]:
    """Stage one planned batch on `spark` (a classic or a Spark Connect session) and mark it staged.

    One Spark action over the ranges: the records read and the malformed ones are counted by an
    observation as they pass (in the JVM: no row crosses into Python before the transform's output), the
    well-formed ones go through the transform and are staged; the sink's writers come back as the action's
    rows. Only a batch that had malformed records reads their ranges again, in a second action that stages
    them as dead letters. Only tags and counts reach the driver."""
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
    good, observation = _counted(parsed, nonce)
    result = pipeline.transform(good)
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
    observed = observation.get
    malformed = int(observed["malformed"])
    dead = _counts(_stage_dead_letters(parsed, settings.psycopg_dsn, nonce, batch_id)) if malformed else {}
    if sum(dead.values()) != malformed:
        raise TransientError(f"batch {batch_id}: {malformed} malformed records were counted, {sum(dead.values())} "
                             "staged as dead letters on a second read of their ranges; nothing was marked staged")
    writers = {"sink": _counts(sink_writers), "dead_letters": dead, "columns": names}
    counts = {"records_read": int(observed["records"]), "sink_rows_staged": sum(r.rows for r in sink_writers),
              "dead_letters": malformed}
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


def _counted(parsed: Any, nonce: str) -> tuple[Any, Any]:
    """The well-formed records, and an observation of all records ("records") and the malformed ones
    ("malformed"). The filter stays above the observation, which Spark does not push filters through:
    pushed below the parse, it made Spark parse every value twice (6 -> 12.7 s on 1M records)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    error = F.col(reader.ERROR_COLUMN)
    observation = Observation(f"eosbatch_{nonce}")
    observed = parsed.observe(observation, F.count(F.lit(1)).alias("records"),
                              F.count_if(error.isNotNull()).alias("malformed"))
    return observed.where(error.isNull()).drop(reader.ERROR_COLUMN), observation


def _stage_dead_letters(parsed: Any, dsn: str, nonce: str, batch_id: int) -> list[WriterResult]:
    """Stage the malformed records as dead letters (a Spark action of their own); their writers."""
    from pyspark.sql import functions as F

    error = F.col(reader.ERROR_COLUMN)
    target = StageTarget("dead_letters", "eosbatch.staged_dead_letters")
    rows = (parsed.where(error.isNotNull()).select(*DEAD_LETTER_COLUMNS, error)
            .mapInArrow(stage_partition(dsn, target, nonce, batch_id, {}), RESULT_SCHEMA).collect())
    return [WriterResult(r["writer"], r["rows"]) for r in rows]


def _counts(results: list[WriterResult]) -> dict[str, int]:
    """The successful attempts that wrote rows, with their counts: what the commit checks staging against
    (a task that staged more than once, over several parent partitions, adds up)."""
    counts: dict[str, int] = {}
    for r in sorted(results):
        counts[r.writer] = counts.get(r.writer, 0) + r.rows
    return {writer: rows for writer, rows in counts.items() if rows > 0}
