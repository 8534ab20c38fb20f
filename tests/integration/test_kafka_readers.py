"""The process step's two Kafka readers (EOSBATCH_KAFKA_READER): Spark's Kafka source and eosbatch's Python data
source (eosbatch.spark.kafka_datasource), on the read cases of the failure matrix: ranges with gaps, ending on
a commit marker or an abort marker (at the log's end too), holding only aborted records, on a compacted topic;
and a differential test: the same ranges give the same rows by both, record by record, and the same dead
letters after the parse. On the stack's Spark Connect server, as the runner reads."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import NewTopic

from eosbatch.config import Settings
from eosbatch.kafka import clients, offsets
from eosbatch.pipeline import KafkaSource
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.spark import kafka_datasource
from examples.orders.generate import ensure_topics, generate
from tests.conftest import _unavailable
from tests.pipelines.factory import ORDER_SCHEMA

pytestmark = [pytest.mark.integration, pytest.mark.spark]

READERS = ["spark", "python"]


@pytest.fixture
def spark(settings: Settings) -> Any:
    if not settings.spark_remote:
        _unavailable("needs the stack's Spark Connect server (EOSBATCH_SPARK_REMOTE)")
    from eosbatch.engine import connect

    return connect.session(settings)


def read(spark: Any, settings: Settings, reader_kind: str, ranges: list[OffsetRange]) -> list[tuple[Any, ...]]:
    """The ranges' rows by one reader, as tuples, in (topic, partition, offset) order."""
    from eosbatch.spark import reader

    df = reader.read_ranges(spark, settings._replace(kafka_reader=reader_kind), ranges, "readers_test")
    rows = [tuple(r) for r in df.collect()]
    return sorted(rows, key=lambda r: (r[2], r[3], r[4]))


def stable_at(settings: Settings, topic: str, partitions: int, expected: int, timeout: float = 30) -> None:
    """Wait until every partition's last stable offset is `expected` (an abort's marker lands after abort)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        bounds = offsets.bounds(settings, [topic])
        if len(bounds) == partitions and all(b.stable == expected for b in bounds.values()):
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic}: last stable offsets {offsets.bounds(settings, [topic])}, expected {expected}")


@pytest.fixture(scope="module")
def transactions(settings: Settings) -> str:
    """One partition: a committed transaction (offsets 0-2, keyed, with headers; its marker at 3), an aborted one
    (4-5, marker 6), a committed one (7-8, marker 9) and an aborted one at the log's end (10-11, marker 12)."""
    topic = f"readers_txn_{os.getpid()}_{int(time.time())}"
    ensure_topics(settings, {topic: 1})
    producer = clients.producer(settings, **{"transactional.id": f"readers-test-{topic}"})
    producer.init_transactions(30)
    for commit, values in ((True, [b"a", b"b", b"c"]), (False, [b"x", b"y"]), (True, [b"d", b"e"]),
                           (False, [b"z", b"w"])):
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, value, key=b"k%d" % i if commit else None, partition=0,
                             headers=[("h", b"v"), ("empty", None)] if value == b"a" else None)
        producer.flush(30)  # an abort purges what was not sent: these must be in the log, then aborted
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    stable_at(settings, topic, 1, 13)
    return topic


# (start, end) -> the offsets read
CASES = {(0, 4): [0, 1, 2],      # ends on a commit marker, with records after it
         (0, 3): [0, 1, 2], (1, 2): [1],
         (3, 7): [],             # a commit marker, aborted records, an abort marker: nothing committed
         (4, 9): [7, 8],         # starts in an aborted transaction, ends on a commit marker
         (0, 13): [0, 1, 2, 7, 8],  # ends at the log's end, after aborted records and their marker
         (9, 13): [], (12, 13): []}


@pytest.mark.parametrize("reader_kind", READERS)
def test_ranges_with_gaps_markers_and_aborted_records_read_exactly_their_committed_records(
        settings, spark, transactions, reader_kind) -> None:
    for (start, end), expected in CASES.items():
        rows = read(spark, settings, reader_kind, [OffsetRange(transactions, 0, start, end)])
        assert [r[4] for r in rows] == expected, (start, end)
    rows = read(spark, settings, reader_kind, [OffsetRange(transactions, 0, 0, 13)])
    key, value, topic, partition, offset, timestamp, timestamp_type, headers = rows[0]
    assert (key, value, topic, partition, offset, timestamp_type) == (b"k0", b"a", transactions, 0, 0, 0)
    assert [tuple(h) for h in headers] == [("h", b"v"), ("empty", None)] and rows[1][7] is None
    assert timestamp is not None


@pytest.fixture(scope="module")
def compacted(settings: Settings) -> tuple[str, list[int]]:
    """A compacted topic of one partition whose log cleaner removed older records of each key: its offsets
    have gaps inside the log, not only at markers. Waits (bounded) for the cleaner."""
    topic = f"readers_compacted_{os.getpid()}_{int(time.time())}"
    admin = clients.admin(settings)
    config = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.001",
              "min.compaction.lag.ms": "0", "delete.retention.ms": "100"}
    for future in admin.create_topics([NewTopic(topic, 1, -1, config=config)]).values():
        future.result()
    producer = clients.producer(settings)
    deadline = time.monotonic() + 120
    left: list[int] = []
    wave = 0
    while time.monotonic() < deadline:
        for i in range(20):  # keys 0-3 again and again; each wave rolls a segment (segment.ms) for the cleaner
            producer.produce(topic, b"v%d-%d" % (wave, i), key=b"k%d" % (i % 4), partition=0)
        producer.flush(30)
        wave += 1
        time.sleep(1)
        left = _offsets_in_log(settings, topic)
        if left and len(left) < left[-1] + 1 - 20:  # more than the last wave's worth of offsets are gone
            return topic, left
    raise AssertionError(f"{topic}: the log cleaner compacted nothing in 120 s ({len(left)} offsets left)")


def _offsets_in_log(settings: Settings, topic: str) -> list[int]:
    consumer = clients.consumer(settings, **{"group.id": "readers-test", "enable.partition.eof": True,
                                             "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([KafkaPartition(topic, 0, 0)])
    found: list[int] = []
    try:
        while True:
            [m] = consumer.consume(1, 10) or [None]
            if m is None or (m.error() is not None):
                return found
            found.append(m.offset())
    finally:
        consumer.close()


@pytest.mark.slow
@pytest.mark.parametrize("reader_kind", READERS)
def test_ranges_of_a_compacted_topic_read_the_records_left(settings, spark, compacted, reader_kind) -> None:
    topic, left = compacted
    gone = sorted(set(range(left[-1] + 1)) - set(left))
    end = left[-1] + 1
    cases = [(0, end), (gone[0], end), (0, gone[-1] + 1), (gone[0], gone[0] + 1)]  # ends and starts on removed ones
    for start, stop in cases:
        rows = read(spark, settings, reader_kind, [OffsetRange(topic, 0, start, stop)])
        assert [r[4] for r in rows] == [o for o in left if start <= o < stop], (start, stop)


@pytest.mark.slow
def test_both_readers_give_the_same_rows_and_the_same_dead_letters(settings, spark, unique) -> None:
    """Three partitions of orders in transactions (every 5th aborted), with malformed records and tombstones;
    the ranges start and end anywhere (markers, aborted records). Record by record the same rows, and after the
    parse the same errors, so the same records become dead letters, with the same bytes."""
    from pyspark.sql import functions as F

    from eosbatch.spark import reader

    topic = f"readers_diff_{unique}"
    generate(settings, topic=topic, records=3000, partitions=3, transaction_size=100, abort_every=5,
             malformed_every=97, tombstone_every=41, seed=3)
    bounds = offsets.bounds(settings, [topic])
    ranges = [OffsetRange(tp.topic, tp.partition, b.low + 7 * tp.partition, b.stable - 3 * tp.partition)
              for tp, b in sorted(bounds.items())]
    by = {kind: read(spark, settings, kind, ranges) for kind in READERS}
    assert len(by["spark"]) > 2000 and by["spark"] == by["python"]

    source = KafkaSource(topics=[topic], value_schema=ORDER_SCHEMA)
    parsed, dead = {}, {}
    for kind in READERS:
        df = reader.read_ranges(spark, settings._replace(kafka_reader=kind), ranges, "readers_test")
        rows = reader.parse(df, source).orderBy("partition", "offset").collect()
        parsed[kind] = [tuple(r) for r in rows]
        dead[kind] = [tuple(r) for r in reader.parse(df, source).where(F.col(reader.ERROR_COLUMN).isNotNull())
                      .select(*reader.dead_letter_columns(source), reader.ERROR_COLUMN)
                      .orderBy("partition", "offset").collect()]
    assert parsed["spark"] == parsed["python"]
    assert dead["spark"] == dead["python"] and len(dead["spark"]) > 20
    assert {d[-1] for d in dead["spark"]} > {reader.TOMBSTONE}  # malformed values, and tombstones


@pytest.mark.parametrize("reader_kind", [*READERS, "auto"])
def test_ranges_over_many_partitions_in_one_batch(settings, spark, unique, reader_kind) -> None:
    """64 partitions in one read: the Python reader spreads them over the engine's cores, one consumer each
    (auto: the Python reader too, as the batch has more than 4 ranges per core and AUTO_MIN_RANGES of them)."""
    assert kafka_datasource.AUTO_MIN_RANGES <= 64
    topic = f"readers_many_{unique}"
    produced = generate(settings, topic=topic, records=600, partitions=64, transaction_size=50, abort_every=4,
                        malformed_every=0, seed=5)
    bounds = offsets.bounds(settings, [topic])
    ranges = [OffsetRange(tp.topic, tp.partition, b.low, b.stable) for tp, b in sorted(bounds.items())]
    rows = read(spark, settings, reader_kind, ranges)
    assert len(rows) == 450 == len(produced.committed)  # every 4th transaction of 50 aborted
