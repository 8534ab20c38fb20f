"""Reading exactly the planned ranges, read_committed; parsing keys and values with the source's formats
(eosbatch.formats), and splitting malformed records off."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING

from eosbatch.config import Settings
from eosbatch.formats import Decoding, Role, json_format, wire
from eosbatch.formats.base import ERROR_COLUMN
from eosbatch.pipeline import KafkaSource
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.spark_kafka_options import reader_options

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

ERROR_COLUMN = ERROR_COLUMN  # re-exported: where the steps always found it


def offsets_json(ranges: list[OffsetRange]) -> tuple[str, str, str]:
    """The connector's `assign`, `startingOffsets` and `endingOffsets` options for these ranges."""
    assign: dict[str, list[int]] = defaultdict(list)
    starts: dict[str, dict[str, int]] = defaultdict(dict)
    ends: dict[str, dict[str, int]] = defaultdict(dict)
    for r in ranges:
        if r.partition in assign[r.topic]:
            raise ValueError(f"{r.tp}: more than one range of a partition in one batch")
        assign[r.topic].append(r.partition)
        starts[r.topic][str(r.partition)] = r.start
        ends[r.topic][str(r.partition)] = r.end
    return json.dumps(assign), json.dumps(starts), json.dumps(ends)


def group_id_prefix(pipeline: str) -> str:
    """The consumer group prefix of the reader's (throwaway) groups: a prefixed ACL on `eosbatch.<pipeline>`
    covers them and the marker's groups."""
    return f"eosbatch.{pipeline}.reader"


# Each task of a Kafka read waits one fetch.max.wait.ms after its records (500 ms by default; measured: 263 ms
# per partition on two executor cores, with the range ending at the log's end or before it, on a plain or a
# transactional topic; 15-18 ms at 5 ms). Most likely the consumer's prefetch beyond the range, which the broker
# holds for that long when it finds nothing new, answered before the consumer can be used again. That was most
# of a tiny batch and minutes of a 1,000-partition one. The setting only bounds how long the broker holds a
# fetch that finds no record: a fetch that finds records returns at once, so a bounded read loses nothing.
FETCH_MAX_WAIT_MS = "5"


def read_ranges(spark: SparkSession, settings: Settings, ranges: list[OffsetRange], pipeline: str) -> DataFrame:
    """The ranges' records, read_committed, with the security settings every other client uses (the JAAS
    line is redacted from plans: spark_kafka_options.REDACTION_REGEX). EOSBATCH_KAFKA_READER=python (or =auto,
    for a batch of many ranges per task) reads them with one librdkafka consumer per task instead
    (eosbatch.spark.kafka_datasource), with the same columns."""
    if settings.kafka_reader != "spark":
        from eosbatch.spark import kafka_datasource

        if kafka_datasource.chosen(spark, settings, ranges):
            return kafka_datasource.read_ranges(spark, settings, ranges, group_id_prefix(pipeline))
    assign, starts, ends = offsets_json(ranges)
    return (spark.read.format("kafka")
            .options(**reader_options(settings.kafka_config))
            .option("groupIdPrefix", group_id_prefix(pipeline))
            .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
            # Aborted records and transaction markers leave gaps; read_committed skips them.
            .option("kafka.isolation.level", "read_committed")
            .option("kafka.fetch.max.wait.ms", FETCH_MAX_WAIT_MS)
            .option("assign", assign)
            .option("startingOffsets", starts)
            .option("endingOffsets", ends)
            .option("includeHeaders", "true")  # the transform sees them (eosbatch.formats: headers)
            .load())


_RECORD = ("topic", "partition", "offset", "timestamp", "timestampType")
# Where each role's format puts its temporary parse (the value's name is the one JSON always had).
_TEMPORARY: dict[Role, str] = {"value": "_eosbatch_parsed", "key": "_eosbatch_key_parsed"}
# The record's bytes, kept beside a key or value that the transform sees parsed: the dead letters keep them.
RAW: dict[Role, str] = {"key": "_eosbatch_raw_key", "value": "_eosbatch_raw_value"}
# The columns of the parse that the transform does not see.
INTERNAL_COLUMNS = (ERROR_COLUMN, *RAW.values())
TOMBSTONE = "value is null (a tombstone): this sink does not take deletes"

Schemas = Mapping[str, Mapping[int, "str | None"]]  # role -> schema id -> writer schema (None: unknown)


def struct(ddl: str) -> StructType:
    return json_format.struct(ddl)


def parse(df: DataFrame, source: KafkaSource, schemas: Schemas | None = None) -> DataFrame:
    """The records with their key and value parsed by the source's formats, the value's fields as columns,
    and an error column: set (never null) for a record whose key or value does not parse. `schemas`: the
    writer schemas of the ids the batch holds, for formats that name their schemas by id (writer_schemas)."""
    from pyspark.sql import functions as F

    decoded = _decodings(source, schemas or {})
    out = df
    for role in ("value", "key"):
        if (temporary := decoded[role].temporary) is not None:
            out = out.withColumn(_TEMPORARY[role], temporary)
    checks = [] if source.formats["value"].passes_null else [(F.col("value").isNull(), F.lit(TOMBSTONE))]
    checks += decoded["value"].checks
    checks += [(F.col("key").isNotNull() & condition, message) for condition, message in decoded["key"].checks]
    error = F.lit(None).cast("string")
    if checks:
        error = F.when(checks[0][0], checks[0][1])
        for condition, message in checks[1:]:
            error = error.when(condition, message)
    roles = [role if decoded[role].raw else decoded[role].column.alias(role) for role in ("key", "value")]
    fields = [F.col(f"{_TEMPORARY['value']}.`{name}`").alias(name) for name in decoded["value"].fields]
    raws = [F.col(role).alias(RAW[role]) for role in ("key", "value") if not decoded[role].raw]
    return out.select(*roles, *_RECORD, "headers", *fields, error.alias(ERROR_COLUMN), *raws)


def _decodings(source: KafkaSource, schemas: Schemas) -> dict[Role, Decoding]:
    from pyspark.sql import functions as F

    return {role: fmt.decoding(F.col(role), role, _TEMPORARY[role], schemas.get(role, {}))
            for role, fmt in source.formats.items()}


def dead_letter_columns(source: KafkaSource) -> list[Column]:
    """A malformed record's columns as the dead letters keep them (staging.DEAD_LETTER_COLUMNS' order, the
    error apart): its position, and its key and value as the bytes they were."""
    from pyspark.sql import functions as F

    raw = {role: F.col(role) if d.raw else F.col(RAW[role]).alias(role) for role, d in _decodings(source, {}).items()}
    return [F.col("topic"), F.col("partition"), F.col("offset"), raw["key"], raw["value"]]


def schema_ids(df: DataFrame, source: KafkaSource) -> dict[Role, set[int]]:
    """The schema ids in the records of `df`, for each role whose format names its writer schemas by id (one
    small aggregate over the 5-byte headers); {} when none does, without a Spark job."""
    from pyspark.sql import functions as F

    roles = [role for role, fmt in source.formats.items() if fmt.schema_source is not None]
    if not roles:
        return {}
    framed = {role: (F.length(role) >= wire.HEADER_BYTES)
              & (F.substring(role, 1, 1) == F.lit(bytes([wire.MAGIC]))) for role in roles}
    [row] = df.agg(*[F.collect_set(F.when(framed[role], F.substring(role, 1, wire.HEADER_BYTES))).alias(role)
                     for role in roles]).collect()
    return {role: {i for h in row[role] if (i := wire.schema_id(bytes(h))) is not None} for role in roles}
