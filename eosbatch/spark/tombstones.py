"""Tombstones (records whose value is null) on the Spark side: which become dead letters, and how the others
are staged beside the transform's rows (docs/deletes.md).

A sink without deletes (only a replace sink takes them) sends every tombstone to the dead letters with the
reason (reader.TOMBSTONE), unless its value format passes null values. A sink with deletes stages each
tombstone as a row of the transform's shape, skipping the transform: its sink key from the record's parsed
`key` (a struct's fields named like sink.key, or one scalar for a one-column sink key, cast to the key
column's type), its source position, its order value (a header or the record's timestamp) and DELETED_COLUMN
true; every other column NULL. A tombstone whose key gives no sink key is a dead letter. The process step
and the verifier's recompute share this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks.names import DELETED_COLUMN
from eosbatch.pipeline import Pipeline
from eosbatch.spark.reader import ERROR_COLUMN, INTERNAL_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

NO_KEY = "value is null (a tombstone) and its key gives no sink.key {}"
POSITION = ("topic", "partition", "offset")


def records(good: DataFrame, pipeline: Pipeline) -> DataFrame:
    """What the transform sees: the well-formed records without the tombstones (staged without it)."""
    from pyspark.sql import functions as F

    return good if pipeline.sink.deletes is None else good.where(F.col("value").isNotNull())


def classified(parsed: DataFrame, pipeline: Pipeline, transform: Callable[[DataFrame], DataFrame]) -> DataFrame:
    """`parsed` (reader.parse: a tombstone is a dead letter, reader.TOMBSTONE, unless its format passes null
    values) as a sink with deletes takes it: a tombstone is well-formed when its key gives the sink key, else
    a dead letter naming sink.key. `transform` is applied, lazily, only to learn the sink key's types."""
    from pyspark.sql import functions as F

    if pipeline.sink.deletes is None:
        return parsed
    tombstone = F.col("value").isNull()
    probe = transform(parsed.where(F.col(ERROR_COLUMN).isNull() & ~tombstone).drop(*INTERNAL_COLUMNS))
    keys = sink_keys(parsed.schema["key"].dataType, pipeline, probe.schema)
    missing = F.lit(False)
    for column in keys.values():
        missing = missing | column.isNull()
    reason = F.when(missing, F.lit(NO_KEY.format(list(pipeline.sink.key))))
    return parsed.withColumn(ERROR_COLUMN, F.when(tombstone, reason).otherwise(F.col(ERROR_COLUMN)))


def sink_keys(key_type: DataType, pipeline: Pipeline, result: StructType) -> dict[str, Column]:
    """The sink key's columns of a tombstone, from its parsed `key` (NULL where it gives none)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StructType

    key = pipeline.sink.key
    types = {f.name: f.dataType for f in result.fields}
    if missing := [k for k in key if k not in types]:
        raise SinkError(f"sink.key: the transform's output lacks key column(s) {missing}; it has {list(types)}")
    if isinstance(key_type, StructType):
        if absent := [k for k in key if k not in key_type.fieldNames()]:
            raise SinkError(f"sink.deletes: a tombstone's sink key comes from the record key, whose fields "
                            f"{key_type.fieldNames()} lack {absent} of sink.key {list(key)}")
        return {k: F.col("key").getField(k).try_cast(types[k]) for k in key}
    if len(key) != 1:
        raise SinkError(f"sink.deletes: the record key is one {key_type.simpleString()} value and sink.key has "
                        f"{len(key)} columns {list(key)}; a composite sink key needs a struct key (Json or Avro)")
    scalar = F.col("key").cast("string") if isinstance(key_type, BinaryType) else F.col("key")
    return {key[0]: scalar.try_cast(types[key[0]])}


def _order_value(pipeline: Pipeline, data_type: DataType) -> Column:
    """A tombstone's order value: its header's text, or its timestamp (milliseconds for a number column)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import NumericType

    deletes = pipeline.sink.deletes
    assert deletes is not None
    if deletes.order_from_timestamp:
        stamp = F.col("timestamp")
        return (F.unix_millis(stamp) if isinstance(data_type, NumericType) else stamp).try_cast(data_type)
    name = deletes.order_header
    found = F.filter("headers", lambda h: h["key"] == F.lit(name))
    return F.try_element_at(found, F.lit(-1)).getField("value").cast("string").try_cast(data_type)


def with_tombstones(result: DataFrame, result_schema: StructType, good: DataFrame, pipeline: Pipeline
                    ) -> DataFrame:
    """The rows to stage: the transform's `result` (DELETED_COLUMN false) and the tombstones among the `good`
    records in its shape (DELETED_COLUMN true). Without deletes, `result` as it is."""
    from pyspark.sql import functions as F

    if pipeline.sink.deletes is None:
        return result
    keys = sink_keys(good.schema["key"].dataType, pipeline, result_schema)
    columns: list[Any] = []
    for field in result_schema.fields:
        if field.name in keys:
            column = keys[field.name]
        elif field.name in pipeline.sink.order_by:
            column = _order_value(pipeline, field.dataType)
        elif field.name in POSITION:
            column = F.col(field.name).try_cast(field.dataType)
        else:
            column = F.lit(None).cast(field.dataType)
        columns.append(column.alias(field.name))
    tombstones = good.where(F.col("value").isNull()).select(*columns, F.lit(True).alias(DELETED_COLUMN))
    return result.withColumn(DELETED_COLUMN, F.lit(False)).unionByName(tombstones)
