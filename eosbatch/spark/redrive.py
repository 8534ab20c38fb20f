"""A redrive batch's input: its dead letters' stored bytes, read from PostgreSQL by the executors (Kafka may
have deleted the records since), as a DataFrame with the Kafka reader's columns, so parse, transform and
staging run as for any batch. A column the ledger does not keep (headers, if the reader has them) is null."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from eosbatch.config import Settings
from eosbatch.ledger import redrive, store
from eosbatch.spark import reader
from eosbatch.spark.kafka_columns import KAFKA_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

PER_SLICE = 2_000  # records one Spark task reads, at most about
MAX_SLICES = 64

_ARROW_TYPES = {"key": "binary", "value": "binary", "topic": "string", "partition": "int32", "offset": "int64",
                "timestamp": "timestamp", "timestampType": "int32"}


def slices(records: int) -> int:
    """How many Spark tasks read a batch of `records` dead letters."""
    return max(1, min(MAX_SLICES, -(-records // PER_SLICE)))


def _arrow_schema() -> pa.Schema:
    import pyarrow as pa

    types = {"binary": pa.binary(), "string": pa.string(), "int32": pa.int32(), "int64": pa.int64(),
             "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.schema([(name, types[kind]) for name, kind in _ARROW_TYPES.items()])


def fetch(dsn: str, batch_id: int, parts: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A function for `mapInArrow` over `spark.range(parts)`: each id is a slice of the batch's records."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        schema = _arrow_schema()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                rows = redrive.fetch_input(dsn, batch_id, parts, int(index))
                columns: list[Any] = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
                yield pa.RecordBatch.from_arrays([pa.array([bytes(v) if isinstance(v, memoryview) else v
                                                            for v in values], type=field.type)
                                                  for values, field in zip(columns, schema, strict=True)],
                                                 schema=schema)

    return read


def read_input(spark: SparkSession, settings: Settings, batch_id: int) -> DataFrame:
    """The redrive batch's records, with the reader's columns (kafka_columns.KAFKA_COLUMNS) in its order."""
    from pyspark.sql import functions as F

    with store.transaction(settings) as cur:
        parts = slices(redrive.input_size(cur, batch_id))
    stored = ", ".join(f"`{name}` {ddl}" for name, ddl in _spark_types().items())
    records = spark.range(parts, numPartitions=parts).mapInArrow(fetch(settings.psycopg_dsn, batch_id, parts), stored)
    wanted = reader.struct(KAFKA_COLUMNS)
    return records.select(*[F.col(f.name) if f.name in _ARROW_TYPES else F.lit(None).cast(f.dataType).alias(f.name)
                            for f in wanted.fields])


def _spark_types() -> dict[str, Any]:
    ddl = {"binary": "BINARY", "string": "STRING", "int32": "INT", "int64": "BIGINT", "timestamp": "TIMESTAMP"}
    return {name: ddl[kind] for name, kind in _ARROW_TYPES.items()}
