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
from eosbatch.spark.staging import DEAD_ROWS, DEAD_WRITER, binary_copy, dead_writers, split_dead_letters, with_tags

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
    tuples = data.count(struct.pack(">h", 7))  # 7 fields per tuple (2 tags + 5 columns), as a 16-bit count
    assert tuples >= 5


def test_binary_copy_of_nothing_writes_nothing() -> None:
    buffer, rows = binary_copy(iter([_batch(0)]), 1, "w:1")
    assert rows == 0 and buffer.getvalue() == b""


def test_dead_writers_reads_the_observed_report() -> None:
    assert dead_writers("ab12:7=3;ab12:9=1") == {"ab12:7": 3, "ab12:9": 1}
    # one task over several parent partitions (a coalesce) reports once per partition: they add up
    assert dead_writers("ab12:7=3;ab12:9=1;ab12:7=2") == {"ab12:7": 5, "ab12:9": 1}
    assert dead_writers("") == {} and dead_writers(None) == {}


class _Task:
    def taskAttemptId(self) -> int:  # noqa: N802 - Spark's name
        return 7


def test_split_passes_well_formed_records_on_without_the_error_column(monkeypatch) -> None:
    import pyspark

    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: _Task()))
    records = pa.RecordBatch.from_pydict({
        "key": pa.array([b"k1", None], pa.binary()), "value": pa.array([b"{}", b"{}"], pa.binary()),
        "topic": ["t", "t"], "partition": pa.array([0, 0], pa.int32()), "offset": pa.array([5, 6], pa.int64()),
        "order_id": ["o1", "o2"], "_err": pa.array([None, None], pa.string())})
    out = list(split_dead_letters("dsn-never-used", "_err", "nonce", 1)([records]))
    assert len(out) == 1  # no dead letters: no COPY and no report row
    assert out[0].schema.names == ["key", "value", "topic", "partition", "offset", "order_id", DEAD_WRITER, DEAD_ROWS]
    assert out[0].column("order_id").to_pylist() == ["o1", "o2"]
    assert out[0].column(DEAD_WRITER).null_count == 2


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
    assert {"eosbatch/steps.py", "tests/pipelines/factory.py", "examples/orders/pipeline.py"} <= set(names)
    assert not any(n.startswith(("pyspark/", "psycopg2/", "confluent_kafka/")) for n in names)


def test_session_url_keeps_the_servers_parameters() -> None:
    from eosbatch.engine.connect import session_url

    assert session_url("sc://127.0.0.1:15002", "s1") == "sc://127.0.0.1:15002/;session_id=s1"
    assert session_url("sc://h:15002/", "s1") == "sc://h:15002/;session_id=s1"
    assert session_url("sc://h:443/;use_ssl=true", "s1") == "sc://h:443/;use_ssl=true;session_id=s1"
