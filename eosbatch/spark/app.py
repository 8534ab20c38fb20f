"""The process step's driver: read the batch's ranges, parse, transform, stage, mark the batch staged."""

from __future__ import annotations

import time
import uuid
from typing import Any, NamedTuple

from eosbatch import config, faults, registry
from eosbatch.context import Context
from eosbatch.exceptions import TerminalError, TransientError
from eosbatch.formats.schemas import to_json
from eosbatch.ledger import lanes, schema_sets, sinks, store
from eosbatch.ledger.staging import DEAD_LETTERS_STAGE
from eosbatch.pipeline import KafkaSource
from eosbatch.spark import reader, redrive, shaping, tasks, tombstones, writer_schemas
from eosbatch.spark.session import on_own_session
from eosbatch.spark.staging import DEAD_LETTER_TIMES, RESULT_SCHEMA, StageTarget, WriterResult, stage_partition


def process(pipeline_name: str, batch_id: int) -> dict[str, int]:
    """The spark-submit engine's driver: a session of its own for this one batch. Its edge: the settings
    come from the environment the runner gave it (eosbatch.engine.submit), the pipeline from the registry."""
    ctx = Context(config.load(), registry.get(pipeline_name), print)
    return on_own_session("eosbatch", process_on, ctx, batch_id, faults.carried())


def process_on(spark: Any, ctx: Context, batch_id: int, fault: dict[str, str]) -> dict[str, int]:
    """Stage one planned batch on `spark` (a classic or a Spark Connect session) and mark it staged.

    One Spark action over the ranges: the records read and the malformed ones are counted by an
    observation as they pass (in the JVM: no row crosses into Python before the transform's output), the
    well-formed ones go through the transform and are staged; the sink's writers come back as the action's
    rows. Only a batch that had malformed records reads their ranges again, in a second action that stages
    them as dead letters; only one whose map tasks ran twice counts its records in an action of their own.
    Only tags and counts reach the driver."""
    settings, pipeline, log = ctx.settings, ctx.pipeline, ctx.log
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
        lanes.check_epoch(cur, batch)
    if batch.state != "planned":
        raise TerminalError(f"batch {batch_id} is {batch.state}; only a planned batch can be processed")
    started = time.monotonic()
    nonce = uuid.uuid4().hex[:12]  # this run's writers; a retried driver gets new tags
    records = (redrive.read_input(spark, settings, batch_id) if batch.kind == "redrive"  # the ledger's bytes
               else reader.read_ranges(spark, settings, list(batch.ranges), pipeline.name))
    schemas = writer_schemas.for_batch(records, settings, pipeline, batch)  # {} unless a format names them by id
    parsed = reader.parse(records, pipeline.source, schemas)
    ranges = list(batch.ranges)
    parsed = tombstones.classified(parsed, pipeline, lambda df: shaping.transformed(pipeline, df, ranges).rows)
    good, observation = _counted(parsed, nonce)
    shaped = shaping.transformed(pipeline, tombstones.records(good, pipeline), ranges)
    result, columns = shaped
    deleting = pipeline.sink.deletes is not None
    if deleting:  # its tombstones beside the transform's rows, flagged
        result = tombstones.with_tombstones(result, result.schema, good, pipeline)
    # Each staging task holds a PostgreSQL connection and a Python worker's turn: EOSBATCH_STAGING_WRITERS, else
    # one per core for a batch of many more ranges than cores (a coalesce, so without a shuffle; it narrows the
    # stages before it as well). eosbatch.spark.tasks.
    cores = tasks.engine_cores(spark) if tasks.needs_cores(len(ranges), settings.staging_writers) else 0
    writers_bound = tasks.staging_tasks(len(ranges), settings.staging_writers, cores)
    if writers_bound:
        result = result.coalesce(writers_bound)
    names = [c.name for c in columns]
    added = sinks.evolve_sink(settings, pipeline, columns) if pipeline.sink.evolve else []
    if added:
        log(f"batch {batch_id}: sink.evolve added column(s) {added} to {pipeline.sink.schema}.{pipeline.sink.table}")
    with store.transaction(settings) as cur:
        sinks.ensure_tables(cur, pipeline, columns)
        if deleting:
            sinks.ensure_deletes(cur, pipeline, columns)
        staged_names = [*names, sinks.DELETED_COLUMN] if deleting else names
        sink_target = StageTarget("sink", sinks.stage_copy_target(pipeline, staged_names).as_string(cur.connection),
                                  shaped.jsonb)
    staged = (result.mapInArrow(stage_partition(settings.psycopg_dsn, sink_target, nonce, batch_id, fault),
                                RESULT_SCHEMA)
              .collect())
    sink_writers = [WriterResult(r["writer"], r["rows"]) for r in staged]
    tally = _tally(observation.get, parsed, batch_id, log)
    dead = _counts(_stage_dead_letters(parsed, pipeline.source, settings.psycopg_dsn, nonce, batch_id,
                                       writers_bound)) if tally.malformed else {}
    if sum(dead.values()) != tally.malformed:
        raise TransientError(f"batch {batch_id}: {tally.malformed} malformed records were counted, "
                             f"{sum(dead.values())} staged as dead letters on a second read of their ranges; "
                             "nothing was marked staged")
    writers: dict[str, Any] = {"sink": _counts(sink_writers), "dead_letters": dead, "columns": names,
                               **({schema_sets.KEY: to_json(schemas)} if schemas else {})}
    if added:  # the sink's shape changed for this batch: it publishes from the outbox (outbox.refusal)
        writers["evolved"] = added
    if deleting:
        writers["deletes"] = True  # staged with the tombstone flag (sinks.stages_tombstones)
        writers["tombstones"] = tally.tombstones  # steps.early
    counts = {"records_read": tally.records, "sink_rows_staged": sum(r.rows for r in sink_writers),
              "dead_letters": tally.malformed}
    faults.point("process.before_staged")
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id, lock=True)
        lanes.check_epoch(cur, batch)
        store.set_state(cur, batch, "staged", writers=writers, records_read=counts["records_read"],
                        dead_letters=counts["dead_letters"])
    log(f"batch {batch_id}: read {counts['records_read']} records, staged {counts['sink_rows_staged']} rows "
        f"and {counts['dead_letters']} dead letters in {time.monotonic() - started:.1f}s")
    faults.point("process.after_staged")
    return counts


# monotonically_increasing_id(): the task's partition id in the upper 31 bits, the row's number within the task
# in the lower 33: a row numbered 0 is a task's first.
_ROW_NUMBER = "_eosbatch_row"
_TASK_ROW_BITS = 33


class _Tally(NamedTuple):
    records: int    # records read (the batch's records_read)
    malformed: int  # of those, the ones that did not parse
    tombstones: int = 0  # of the others, tombstones (a sink with deletes stages them)


def _record_counts() -> list[Any]:
    """The aggregates of records read ("records"), malformed ones ("malformed") and well-formed tombstones
    ("tombstones") over parsed records."""
    from pyspark.sql import functions as F

    error = F.col(reader.ERROR_COLUMN)
    return [F.count(F.lit(1)).alias("records"), F.count_if(error.isNotNull()).alias("malformed"),
            F.count_if(error.isNull() & F.col("value").isNull()).alias("tombstones")]


def _counted(parsed: Any, nonce: str) -> tuple[Any, Any]:
    """The well-formed records, and an observation of all records ("records"), the malformed ones
    ("malformed"), the tasks that read any ("tasks") and their distinct partitions ("partitions").

    An observation is an accumulator in a transformation: a map task that ran again because its shuffle
    output was lost with its executor adds its counts twice. Then "tasks" exceeds "partitions" (the
    partition ids are a set, which a second merge leaves alone) and the counts are only upper bounds.
    The filter stays above the observation, which Spark does not push filters through: pushed below the
    parse, it made Spark parse every value twice (6 -> 12.7 s on 1M records)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    error = F.col(reader.ERROR_COLUMN)
    row = F.col(_ROW_NUMBER)
    first = row.bitwiseAND((1 << _TASK_ROW_BITS) - 1) == 0
    observation = Observation(f"eosbatch_{nonce}")
    observed = (parsed.withColumn(_ROW_NUMBER, F.monotonically_increasing_id())
                .observe(observation, *_record_counts(), F.count_if(first).alias("tasks"),
                         F.size(F.collect_set(F.when(first, F.shiftright(row, _TASK_ROW_BITS)))).alias("partitions")))
    return observed.where(error.isNull()).drop(*reader.INTERNAL_COLUMNS, _ROW_NUMBER), observation


def _tally(observed: Any, parsed: Any, batch_id: int, log: Any) -> _Tally:
    """The records read and the malformed ones: the observation's counts if every task's counts were merged
    once, else a count of their own (an action, whose result Spark merges once per partition)."""
    if "tasks" not in observed:
        # No metrics come back when nothing committed was read (e.g. ranges of an aborted transaction only):
        # Spark drops the observation of an empty plan.
        log(f"batch {batch_id}: Spark reported no counts (nothing committed read?); counting the records")
    elif int(observed["tasks"]) == int(observed["partitions"]):
        return _Tally(int(observed["records"]), int(observed["malformed"]), int(observed["tombstones"]))
    else:
        log(f"batch {batch_id}: {observed['tasks']} tasks read records in {observed['partitions']} partitions "
            "(a task ran again after its executor was lost); counting the records once more")
    [exact] = parsed.agg(*_record_counts()).collect()
    return _Tally(int(exact["records"]), int(exact["malformed"]), int(exact["tombstones"]))


def _stage_dead_letters(parsed: Any, source: KafkaSource, dsn: str, nonce: str, batch_id: int,
                        writers_bound: int | None = None) -> list[WriterResult]:
    """Stage the malformed records as dead letters (a Spark action of their own), their key and value as the
    bytes they were; their writers. `writers_bound`: the sink's staging tasks, the same bound here (every task
    of this read stages, even one without malformed records)."""
    from pyspark.sql import functions as F

    error = F.col(reader.ERROR_COLUMN)
    target = StageTarget("dead_letters", DEAD_LETTERS_STAGE)
    malformed = parsed.where(error.isNotNull()).select(*reader.dead_letter_columns(source), error,
                                                        *DEAD_LETTER_TIMES)
    if writers_bound:
        malformed = malformed.coalesce(writers_bound)
    rows = (malformed
            .mapInArrow(stage_partition(dsn, target, nonce, batch_id, {}), RESULT_SCHEMA).collect())
    return [WriterResult(r["writer"], r["rows"]) for r in rows]


def _counts(results: list[WriterResult]) -> dict[str, int]:
    """The successful attempts that wrote rows, with their counts: what the commit checks staging against
    (a task that staged more than once, over several parent partitions, adds up)."""
    counts: dict[str, int] = {}
    for r in sorted(results):
        counts[r.writer] = counts.get(r.writer, 0) + r.rows
    return {writer: rows for writer, rows in counts.items() if rows > 0}
