"""Reading exactly the planned ranges, read_committed, and splitting malformed records off."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING

from eosbatch.config import Settings
from eosbatch.pipeline import KafkaSource
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.spark_kafka_options import reader_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

ERROR_COLUMN = "_eosbatch_error"
_CORRUPT = "_eosbatch_corrupt"


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


def read_ranges(spark: SparkSession, settings: Settings, ranges: list[OffsetRange], pipeline: str,
                headers: bool = False) -> DataFrame:
    """The ranges' records, read_committed, with the security settings every other client uses (the JAAS
    line is redacted from plans: spark_kafka_options.REDACTION_REGEX); with `headers`, theirs too."""
    assign, starts, ends = offsets_json(ranges)
    return (spark.read.format("kafka")
            .option("includeHeaders", "true" if headers else "false")
            .options(**reader_options(settings.kafka_config))
            .option("groupIdPrefix", group_id_prefix(pipeline))
            .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
            # Aborted records and transaction markers leave gaps; read_committed skips them.
            .option("kafka.isolation.level", "read_committed")
            .option("kafka.fetch.max.wait.ms", FETCH_MAX_WAIT_MS)
            .option("assign", assign)
            .option("startingOffsets", starts)
            .option("endingOffsets", ends)
            .load())


# The Kafka source's columns (without headers), fixed by the connector: knowing them spares the Spark
# Connect client a round trip to the server per batch to ask.
KAFKA_COLUMNS = "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, " \
                "timestampType INT"


def struct(ddl: str) -> StructType:
    from pyspark.sql.types import StructType

    parsed = StructType.fromDDL(ddl)
    assert isinstance(parsed, StructType), "a DDL field list parses to a struct"
    return parsed


def parse(df: DataFrame, source: KafkaSource, headers: bool = False) -> DataFrame:
    """Add the value's JSON fields as columns and an error column: set (never null) for a malformed record.
    A tombstone (a null value) is left to eosbatch.spark.tombstones. `headers`: read with them, keep them."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    kafka = struct(KAFKA_COLUMNS).fieldNames() + (["headers"] if headers else [])
    if source.value_schema is None:
        return df.select(*kafka, F.lit(None).cast("string").alias(ERROR_COLUMN))
    declared = struct(source.value_schema)
    # Parsed as nullable so that a missing required field is reported by name instead of failing the read.
    relaxed = StructType([StructField(f.name, f.dataType, True) for f in declared.fields]
                         + [StructField(_CORRUPT, StringType(), True)])
    text = F.col("value").cast("string")
    parsed = F.from_json(text, relaxed, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT})
    out = df.withColumn("_eosbatch_parsed", parsed)
    checks = [(F.col("value").isNull(), F.lit(None).cast("string")),
              (F.col(f"_eosbatch_parsed.{_CORRUPT}").isNotNull(),
               F.lit(f"not a JSON object matching schema ({source.value_schema})"))]
    checks += [(F.col(f"_eosbatch_parsed.`{f.name}`").isNull(), F.lit(f"missing required field {f.name!r}"))
               for f in declared.fields if not f.nullable]
    error = F.when(checks[0][0], checks[0][1])
    for condition, message in checks[1:]:
        error = error.when(condition, message)
    fields = [F.col(f"_eosbatch_parsed.`{f.name}`").alias(f.name) for f in declared.fields]
    return out.select(*kafka, *fields, error.alias(ERROR_COLUMN))
