"""The pure parts of the Spark side: binary COPY encoding of staging rows and the connector's offset options."""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from eosbatch.exceptions import EosbatchError
from eosbatch.protocol.ranges import OffsetRange
from eosbatch.spark.reader import offsets_json
from eosbatch.spark.staging import binary_copy, with_tags

pytestmark = pytest.mark.unit

def _batch(rows: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "id": pa.array(range(rows), pa.int64()), "name": pa.array([f"n\t{i}" for i in range(rows)], pa.string()),
        "amount": pa.array([Decimal("1.50")] * rows, pa.decimal128(10, 2)),
        "at": pa.array([datetime(2024, 1, 2, tzinfo=UTC)] * rows, pa.timestamp("us", tz="UTC")),
        "raw": pa.array([b"\x00\xff"] * rows, pa.binary())})


def test_with_tags_puts_batch_id_and_writer_first() -> None:
    tagged = with_tags(_batch(3), 42, "abc:7")
    assert tagged.schema.names[:2] == ["_batch", "_writer"] and tagged.num_rows == 3
    assert tagged.column(0).to_pylist() == [42] * 3 and tagged.column(1).to_pylist() == ["abc:7"] * 3
    assert tagged.schema.names[2:] == _batch(0).schema.names


def test_binary_copy_is_one_pgcopy_stream_of_every_row() -> None:
    buffer, rows = binary_copy(iter([_batch(2), _batch(0), _batch(3)]), 1, "w:1")
    data = buffer.getvalue()
    assert rows == 5
    assert data.startswith(b"PGCOPY\n\xff\r\n\x00")  # the binary COPY signature
    assert data.endswith(b"\xff\xff")  # the trailer: a field count of -1
    assert _field_counts(data) == [7] * 5  # one tuple per row, each of 2 tags + 5 columns, nothing twice


def _field_counts(data: bytes) -> list[int]:
    """Walk a binary COPY stream (signature, flags, extension, tuples of length-prefixed fields, trailer):
    each tuple's field count, in order; it fails on any byte that does not fit the format."""
    assert data[:11] == b"PGCOPY\n\xff\r\n\x00"
    (extension,) = struct.unpack_from(">I", data, 15)
    at, counts = 19 + extension, []
    while True:
        (fields,) = struct.unpack_from(">h", data, at)
        at += 2
        if fields == -1:
            assert at == len(data), "bytes after the trailer"
            return counts
        for _ in range(fields):
            (length,) = struct.unpack_from(">i", data, at)
            at += 4 + max(length, 0)
        counts.append(fields)


def test_binary_copy_of_nothing_writes_nothing() -> None:
    buffer, rows = binary_copy(iter([_batch(0)]), 1, "w:1")
    assert rows == 0 and buffer.getvalue() == b""


def test_offsets_json_builds_assign_starting_and_ending_offsets() -> None:
    ranges = [OffsetRange("orders", 0, 10, 20), OffsetRange("orders", 2, 0, 5),
              OffsetRange("refunds", 1, 7, 9)]
    assign, starts, ends = offsets_json(ranges)
    assert json.loads(assign) == {"orders": [0, 2], "refunds": [1]}
    assert json.loads(starts) == {"orders": {"0": 10, "2": 0}, "refunds": {"1": 7}}
    assert json.loads(ends) == {"orders": {"0": 20, "2": 5}, "refunds": {"1": 9}}


def test_offsets_json_of_nothing() -> None:
    assert offsets_json([]) == ("{}", "{}", "{}")


def test_offsets_json_refuses_two_ranges_of_one_partition() -> None:
    with pytest.raises((ValueError, EosbatchError)):
        offsets_json([OffsetRange("orders", 0, 0, 40), OffsetRange("orders", 0, 60, 100)])


def test_code_archive_ships_eosbatch_the_pipelines_and_the_project_packages_they_import(tmp_path) -> None:
    """A Spark Connect server's executors see only what the archive holds: a pipeline module that imports a
    sibling package (tests.pipelines.factory imports examples.orders) needs that package too; installed
    libraries are left to the executors' environment."""
    import zipfile

    from eosbatch.engine.submit import code_archive

    names = zipfile.ZipFile(code_archive(["tests.pipelines.factory"], tmp_path)).namelist()
    assert {"eosbatch/steps/__init__.py", "tests/pipelines/factory.py", "examples/orders/pipeline.py"} <= set(names)
    assert not any(n.startswith(("pyspark/", "psycopg2/", "confluent_kafka/")) for n in names)


def test_session_url_keeps_the_servers_parameters() -> None:
    from eosbatch.engine.connect import session_url

    assert session_url("sc://127.0.0.1:15002", "s1") == "sc://127.0.0.1:15002/;session_id=s1"
    assert session_url("sc://h:15002/", "s1") == "sc://h:15002/;session_id=s1"
    assert session_url("sc://h:443/;use_ssl=true", "s1") == "sc://h:443/;use_ssl=true;session_id=s1"


def test_a_batch_of_many_more_ranges_than_cores_is_staged_by_one_task_per_core() -> None:
    from eosbatch.spark import tasks

    assert tasks.staging_tasks(ranges=1000, configured=0, cores=2) == 2
    assert tasks.staging_tasks(ranges=1000, configured=0, cores=32) == 32
    # a batch of few ranges keeps one task per range (the chaos and failure-matrix batches: 1-4 partitions)
    assert tasks.staging_tasks(ranges=8, configured=0, cores=2) is None
    assert tasks.staging_tasks(ranges=4, configured=0, cores=1) is None
    assert not tasks.needs_cores(4, 0)  # no Spark job spent asking the cores for such a batch
    # EOSBATCH_STAGING_WRITERS decides when set, whatever the ranges
    assert tasks.staging_tasks(ranges=3, configured=1, cores=2) == 1
    assert tasks.staging_tasks(ranges=1000, configured=16, cores=2) == 16
    assert not tasks.needs_cores(1000, 16)


def test_the_python_readers_tasks_share_the_ranges_by_offsets_largest_first() -> None:
    from eosbatch.spark.kafka_datasource import splits

    ranges = [OffsetRange("t", p, 0, size) for p, size in enumerate([100, 10, 60, 50, 5])]
    groups = splits(ranges, 2)
    assert [[r.partition for r in g] for g in groups] == [[0, 1, 4], [2, 3]]  # 115 and 110 offsets
    assert sorted(r for g in groups for r in g) == sorted(ranges)
    assert splits(ranges, 10) == [[r] for r in sorted(ranges, key=lambda r: -r.size)]  # one range a task at most
    assert splits([], 4) == []
    thousand = [OffsetRange("t", p, 0, 22) for p in range(1000)]
    assert [len(g) for g in splits(thousand, 2)] == [500, 500]


def test_the_auto_reader_is_the_python_one_when_its_tasks_would_each_read_several_ranges() -> None:
    from eosbatch.config import Settings
    from eosbatch.spark.kafka_datasource import chosen

    ranges = [OffsetRange("t", p, 0, 20) for p in range(100)]
    bounded = Settings("postgresql://h/db", "h:9092", {}, "local[2]", staging_writers=2)  # no Spark asked
    assert chosen(None, bounded._replace(kafka_reader="auto"), ranges)  # 100 ranges in 2 tasks
    assert not chosen(None, bounded._replace(kafka_reader="auto"), ranges[:2])  # a task per range
    assert not chosen(None, bounded._replace(kafka_reader="auto"), ranges[:10])  # too few to pay its fixed cost
    assert chosen(None, bounded._replace(kafka_reader="python"), ranges[:1])
    assert not chosen(None, bounded._replace(kafka_reader="spark"), ranges)
    assert chosen(None, bounded, ranges)  # auto, the default
