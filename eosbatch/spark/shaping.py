"""The transform's output made ready for staging, the same way by the process step (spark/app.py) and by
verify's recompute (spark/recompute.py): the transform called with the batch's info if it takes it, structs
and maps rendered as JSON text (stored as jsonb), and for an append sink each row numbered within its record.

An append sink keys a row by its source position, (topic, partition, offset), and its number among the rows
the transform made of that record, `row_in_record` (1, 2, ...). The transform must keep topic, partition and
offset. The rows of one record are numbered in the order of all their columns' values, so a replay of the
same records numbers the same rows the same way, whatever order Spark computes them in; rows equal in every
column are interchangeable, so which of them gets which number changes nothing stored. The numbering is a
window over (topic, partition, offset): one shuffle of the transform's output, done in parallel before the
commit rather than as a sort inside it."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import Column
from eosbatch.pipeline import APPEND_ROW_COLUMN, BatchInfo, Pipeline
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.spark import schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

POSITION = ("topic", "partition", "offset")


class Shaped(NamedTuple):
    """The rows to stage, their columns as the sink stores them, and which of them are jsonb."""
    rows: DataFrame
    columns: list[Column]

    @property
    def jsonb(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.pg_type == schema.JSONB)


def transformed(pipeline: Pipeline, parsed: DataFrame, ranges: list[OffsetRange]) -> Shaped:
    """The pipeline's transform over the parsed, well-formed records of `ranges`, shaped for the sink."""
    return shaped(pipeline, pipeline.transformed(parsed, BatchInfo(ranges=tuple(ranges))))


def shaped(pipeline: Pipeline, result: DataFrame) -> Shaped:
    """`result` with JSON text for its jsonb columns and, for an append sink, each row's number within its
    record; SinkError (terminal) for a column eosbatch cannot store, or an append sink's missing position."""
    from pyspark.sql import functions as F

    columns = schema.columns(result.schema)  # SinkError first, for a type nothing stores
    jsonb = {c.name for c in columns if c.pg_type == schema.JSONB}
    if jsonb:
        result = result.select(*[F.to_json(F.col(f"`{n}`")).alias(n) if n in jsonb else F.col(f"`{n}`")
                                 for n in result.columns])
    if pipeline.sink.mode != "append":
        return Shaped(result, columns)
    names = [c.name for c in columns]
    if missing := [c for c in POSITION if c not in names]:
        raise SinkError(f"sink.mode: an append sink keys each row by its source position: the transform's output "
                        f"must keep {list(POSITION)} (it lacks {missing}; it has {names})")
    if APPEND_ROW_COLUMN in names:
        raise SinkError(f"sink.mode: an append sink numbers each record's rows in {APPEND_ROW_COLUMN!r}, which the "
                        "transform's output already has; rename it")
    return Shaped(numbered(result), [*columns, Column(APPEND_ROW_COLUMN, "integer")])


def numbered(result: DataFrame) -> DataFrame:
    """`result` with APPEND_ROW_COLUMN: 1, 2, ... over the rows of each (topic, partition, offset), in the
    order of all their other columns (nulls first), so that the same rows always get the same numbers."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = [F.col(f"`{n}`").asc_nulls_first() for n in result.columns if n not in POSITION]
    window = Window.partitionBy(*[F.col(c) for c in POSITION]).orderBy(*(order or [F.col("offset")]))
    return result.withColumn(APPEND_ROW_COLUMN, F.row_number().over(window))
