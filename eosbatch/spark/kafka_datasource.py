"""The Python Kafka reader (EOSBATCH_KAFKA_READER=python): the planned ranges as a Spark Python data source whose
tasks each read many Kafka partitions with one librdkafka consumer (eosbatch.kafka.range_reader), instead of the
Spark Kafka source's task and Java consumer per partition.

It gives the Kafka source's columns (kafka_columns.KAFKA_COLUMNS), with the same values, so parse() and everything
after it is the same; each partition's records come in offset order. The ranges are spread over as many tasks
as the Kafka source's batch would be coalesced to (spark.tasks: one per core past RANGES_PER_CORE ranges a
core), largest first onto the least loaded task. The records cross into Spark as Arrow batches.

The data source runs in the engine's Python workers (a Connect server's, or spark-submit's executors): they
import eosbatch from the session's code archive, and need confluent_kafka and pyarrow installed in the Python
they run (PYSPARK_PYTHON). The client settings travel as options; the user's librdkafka settings (which may hold
a password) under a key that Spark's redaction pattern hides from plans (spark_kafka_options.REDACTION_REGEX).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from eosbatch.config import Settings
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.spark import tasks
from eosbatch.spark.kafka_columns import KAFKA_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

NAME = "eosbatch_kafka_ranges"
SPLITS = "splits"  # JSON: a list per task of [topic, partition, start, end]
CLIENT = "client"  # JSON: bootstrap, connect timeout, log folder, group id, stall bound
SECRET_CONFIG = "secret.kafka.config"  # JSON: the user's librdkafka settings ("secret": redacted from plans)
# librdkafka's timestamp types -> the Java client's TimestampType ids, which the Kafka source gives.
TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}  # not available, create time, log append time
MIN_STALL_S = 30.0  # a task fails when nothing arrived for this long (or 3 connect timeouts, if longer)

_registered: set[int] = set()  # id(session) of the sessions that know the data source


def splits(ranges: Sequence[OffsetRange], count: int) -> list[list[OffsetRange]]:
    """`ranges` in at most `count` groups of about equal offsets (largest first onto the least loaded group),
    each sorted by topic and partition; no empty group."""
    groups: list[list[OffsetRange]] = [[] for _ in range(max(1, min(count, len(ranges))))]
    loads = [0] * len(groups)
    for r in sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition)):
        lightest = loads.index(min(loads))
        groups[lightest].append(r)
        loads[lightest] += max(r.size, 1)
    return [sorted(g) for g in groups if g]


def options(settings: Settings, ranges: Sequence[OffsetRange], count: int, group_id: str) -> dict[str, str]:
    """The data source's options for reading `ranges` in `count` tasks."""
    client = {"bootstrap": settings.kafka_bootstrap, "connect_timeout_s": settings.connect_timeout_s,
              "log_dir": settings.log_dir, "group_id": group_id,
              "stall_s": max(MIN_STALL_S, 3 * settings.connect_timeout_s)}
    return {SPLITS: json.dumps([[list(r) for r in g] for g in splits(ranges, count)]),
            CLIENT: json.dumps(client), SECRET_CONFIG: json.dumps(settings.kafka_config)}


# `auto` reads a batch of fewer ranges with the Kafka source: this reader's fixed cost (a Python worker plans the
# read on the driver) pays back only past a few dozen partitions. bench.scale, one sitting on two cores: 10
# partitions, process 5.8 s with this reader against 2.2 s; 100, 0.8 s against 2.6 s; 1,000, 2.5 s against 15.6 s.
AUTO_MIN_RANGES = 64


def task_count(spark: SparkSession, settings: Settings, ranges: Sequence[OffsetRange]) -> int:
    """How many tasks read `ranges`: as many as the batch is staged by (spark.tasks), else one per range."""
    cores = tasks.engine_cores(spark) if tasks.needs_cores(len(ranges), settings.staging_writers) else 0
    return tasks.staging_tasks(len(ranges), settings.staging_writers, cores) or len(ranges)


def chosen(spark: SparkSession, settings: Settings, ranges: Sequence[OffsetRange]) -> bool:
    """Whether this reader reads the batch: EOSBATCH_KAFKA_READER=python, or =auto and its tasks would each read
    several ranges (measured: it reads a batch of many small partitions ~5x faster than the Kafka source, which
    makes a task and a consumer per partition; a batch of few large ones ~1.5x slower: its records cross from
    Python)."""
    if settings.kafka_reader == "python":
        return True
    return (settings.kafka_reader == "auto" and len(ranges) >= AUTO_MIN_RANGES
            and task_count(spark, settings, ranges) < len(ranges))


def read_ranges(spark: SparkSession, settings: Settings, ranges: list[OffsetRange], group_id: str) -> DataFrame:
    """The ranges' records, read_committed, as the Spark Kafka source gives them (reader.read_ranges)."""
    if id(spark) not in _registered:
        spark.dataSource.register(KafkaRanges)
        _registered.add(id(spark))
    count = task_count(spark, settings, ranges)
    return (spark.read.format(NAME).schema(KAFKA_COLUMNS)
            .options(**options(settings, ranges, count, group_id)).load())


class KafkaRanges(DataSource):
    """spark.read.format(NAME): exact offset ranges of Kafka, read_committed (the options: `options`)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return KAFKA_COLUMNS

    def reader(self, schema: Any) -> DataSourceReader:
        return _RangesReader(dict(self.options))


class _Split(InputPartition):
    def __init__(self, ranges: list[OffsetRange]) -> None:
        super().__init__(len(ranges))
        self.ranges = ranges


class _RangesReader(DataSourceReader):
    def __init__(self, given: dict[str, str]) -> None:
        self.splits = [[OffsetRange(*r) for r in g] for g in json.loads(given[SPLITS])]
        self.client = json.loads(given[CLIENT])
        self.kafka_config = json.loads(given[SECRET_CONFIG])

    def partitions(self) -> Sequence[InputPartition]:
        return [_Split(g) for g in self.splits] or [_Split([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from eosbatch.kafka.range_reader import read_exact

        assert isinstance(partition, _Split)
        client = self.client
        settings = Settings("", client["bootstrap"], self.kafka_config, "",
                            connect_timeout_s=client["connect_timeout_s"], log_dir=client["log_dir"])
        for messages in read_exact(settings, partition.ranges, client["group_id"], client["stall_s"]):
            yield to_arrow(messages)


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                      ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
                      ("timestampType", pa.int32()), ("headers", pa.list_(header))])


def to_arrow(messages: Sequence[Any]) -> pa.RecordBatch:
    """Kafka messages (confluent_kafka) as an Arrow batch of the Kafka source's columns. A record without
    headers has null headers, as the Kafka source gives it."""
    import pyarrow as pa

    stamps = [m.timestamp() for m in messages]
    headers = [[{"key": k, "value": v} for k, v in h] if (h := m.headers()) else None for m in messages]
    columns = [[m.key() for m in messages], [m.value() for m in messages], [m.topic() for m in messages],
               [m.partition() for m in messages], [m.offset() for m in messages],
               [ms * 1000 for _, ms in stamps],
               [TIMESTAMP_TYPES.get(kind, -1) for kind, _ in stamps], headers]
    schema = arrow_schema()
    return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)],
                                      schema=schema)
