"""The verifier's recompute: the pipeline's transform applied to the committed input, batch by batch.

It reads every committed batch's ranges again (read_committed), parses and transforms them as the process
step would, and writes the result rows and the malformed records' positions to a JSON file; the verifier
compares them with the sink and the dead letters. Batches whose ranges were compacted (cleanup.compact) are
read together, as the part of the merged committed coverage that no other batch holds: their boundaries are
gone, which changes nothing for an accumulate sink or a row-by-row transform. A transform that takes the batch's
info (pipeline.BatchInfo) gets each batch's own ranges, as the process step gave them (the merged ranges, for
compacted batches). A sink with deletes gets its tombstones as rows flagged DELETED_COLUMN, as the process step
stages them (spark.tombstones). It shares the reader and the transform with the process step, and nothing with
the commit and publish path it checks. It collects on the driver: a check for test and audit volumes, not for
a whole history of billions of rows.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from eosbatch import config, registry
from eosbatch.context import Context
from eosbatch.ledger import claims, store
from eosbatch.ledger.audit import committed_batches
from eosbatch.protocol.ranges import subtract
from eosbatch.protocol.states import claims_coverage
from eosbatch.spark import reader, schema, shaping, tombstones, writer_schemas
from eosbatch.spark.session import on_own_session


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime) and value.tzinfo is None:  # Spark's TimestampType: the driver's local time
        return value.astimezone(UTC).isoformat()
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, list):  # an array column
        return [_plain(v) for v in value]
    return value


def _rows(pipeline: Any, ranges: list[Any], parsed: Any) -> Any:
    """The transform's rows over `parsed`, shaped for the sink, as the process step stages them."""
    return shaping.transformed(pipeline, parsed, ranges).rows


def recompute(pipeline_name: str) -> dict[str, Any]:
    """The spark-submit engine's driver: a session of its own. Its edge: the settings come from the
    environment the runner gave it (eosbatch.engine.submit), the pipeline from the registry."""
    ctx = Context(config.load(), registry.get(pipeline_name), print)
    return on_own_session("eosbatch-verify", recompute_on, ctx)


def recompute_on(spark: Any, ctx: Context) -> dict[str, Any]:
    """{"columns", "rows", "malformed", "records"} of the committed input, recomputed on `spark`."""
    from pyspark.sql import functions as F

    settings, pipeline = ctx.settings, ctx.pipeline
    with store.transaction(settings) as cur:
        batches = committed_batches(cur, pipeline.name)
        # A reprocess re-ran ranges that another batch committed: counted there. Each run decodes with the
        # writer schemas its batch decoded with (Avro); the compacted rest with those of every batch.
        runs = [(list(b.ranges), writer_schemas.stored(b)) for b in batches if claims_coverage(b.kind) and b.ranges]
        if any(claims_coverage(b.kind) and not b.ranges for b in batches):  # compacted
            rest = subtract(claims.committed_coverage(cur, pipeline.name), [r for run, _ in runs for r in run])
            every: dict[str, dict[int, str | None]] = {}
            for b in batches:
                for role, ids in writer_schemas.stored(b).items():
                    every[role] = {**ids, **every.get(role, {})}
            runs = [(rest, every), *runs] if rest else runs
    rows: list[dict[str, Any]] = []
    malformed: list[list[Any]] = []
    columns: list[str] = []
    records = 0
    for ranges, pinned in runs:
        read = reader.read_ranges(spark, settings, ranges, pipeline.name)
        parsed = reader.parse(read, pipeline.source, writer_schemas.resolved(read, settings, pipeline, pinned))
        parsed = tombstones.classified(parsed, pipeline, functools.partial(_rows, pipeline, ranges))
        records += parsed.count()
        malformed += [[r[0], r[1], r[2]] for r in parsed.where(F.col(reader.ERROR_COLUMN).isNotNull())
                      .select("topic", "partition", "offset").collect()]
        good = parsed.where(F.col(reader.ERROR_COLUMN).isNull()).drop(*reader.INTERNAL_COLUMNS)
        result, stored = shaping.transformed(pipeline, tombstones.records(good, pipeline), ranges)
        columns = list(result.columns)
        jsonb = {c.name for c in stored if c.pg_type == schema.JSONB}
        if pipeline.sink.deletes is not None:  # its tombstones too, flagged DELETED_COLUMN (verify weighs them)
            result = tombstones.with_tombstones(result, result.schema, good, pipeline)
        rows += [{c: json.loads(v) if c in jsonb and v is not None else _plain(v) for c, v in row.asDict().items()}
                 for row in result.collect()]
    return {"columns": columns, "rows": rows, "malformed": malformed, "records": records}
