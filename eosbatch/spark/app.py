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
from eosbatch.spark.session import on_own_session
from eosbatch.spark.staging import RESULT_SCHEMA, StageTarget, WriterResult, stage_partition


def process(pipeline_name: str, batch_id: int, log: Any = print) -> dict[str, int]:
    """The spark-submit engine's driver: a session of its own for this one batch."""
    return on_own_session("eosbatch", process_on, pipeline_name, batch_id, log, faults.carried())


def process_on(spark: Any, pipeline_name: str, batch_id: int, log: Any, fault: dict[str, str]) -> dict[str, int]:
    """Stage one planned batch on `spark` (a classic or a Spark Connect session) and mark it staged.

    One Spark action: the dead letters and the transform's rows are staged by the two branches of one
    union, and the records read are counted by an observation on the way; only tags and counts come back."""
    settings = config.load()
    pipeline: Pipeline = registry.get(pipeline_name)
    with store.transaction(settings) as cur:
        batch = store.get_batch(cur, batch_id)
        store.check_epoch(cur, batch)
    if batch.state != "planned":
        raise TerminalError(f"batch {batch_id} is {batch.state}; only a planned batch can be processed")
    started = time.monotonic()
    nonce = uuid.uuid4().hex[:12]  # this run's writers; a retried driver gets new tags
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    parsed = reader.parse(reader.read_ranges(spark, settings, list(batch.ranges)), pipeline.source)
    good_rows = Observation(f"eosbatch_good_{nonce}")
    good = (parsed.where(F.col(reader.ERROR_COLUMN).isNull()).drop(reader.ERROR_COLUMN)
            .observe(good_rows, F.count(F.lit(1)).alias("rows")))
    result = pipeline.transform(good)
    columns = schema.columns(result.schema)
    names = [c.name for c in columns]
    with store.transaction(settings) as cur:
        sinks.ensure_tables(cur, pipeline, columns)
        sink_target = StageTarget("sink", sinks.stage_copy_target(pipeline, names).as_string(cur.connection))
    dead_target = StageTarget("dead_letters", "eosbatch.staged_dead_letters")
    dsn = settings.psycopg_dsn
    dead = (parsed.where(F.col(reader.ERROR_COLUMN).isNotNull())
            .select("topic", "partition", "offset", "key", "value", reader.ERROR_COLUMN))
    staged = (dead.mapInArrow(stage_partition(dsn, dead_target, nonce, batch_id, fault), RESULT_SCHEMA)
              .unionByName(result.mapInArrow(stage_partition(dsn, sink_target, nonce, batch_id, fault),
                                              RESULT_SCHEMA))
              .collect())
    results = {kind: [WriterResult(r["writer"], r["rows"]) for r in staged if r["kind"] == kind]
               for kind in ("sink", "dead_letters")}
    dead_count = sum(r.rows for r in results["dead_letters"])
    writers = {"sink": _counts(results["sink"]), "dead_letters": _counts(results["dead_letters"]), "columns": names}
    counts = {"records_read": int(good_rows.get["rows"]) + dead_count,
              "sink_rows_staged": sum(r.rows for r in results["sink"]), "dead_letters": dead_count}
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
