"""The append sink, evolving sink tables and the transform's batch info on the real stack, through the CLI as a
user runs it (tests/pipelines/shapes.py; the append sink's crash cases are tests/chaos/test_chaos.py's "events").
Each test ends with the independent count: the input against the sink, the read_committed output and the dead
letters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from psycopg2 import sql

from eosbatch import KafkaSource, Pipeline, PostgresSink
from eosbatch.exceptions import TransientError
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import positions, sinks, store
from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import evolve
from eosbatch.verify import check_output
from examples.orders import generate
from tests.scenario import ROOT

pytestmark = [pytest.mark.integration]


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


# ---------------------------------------------------------------- evolving tables and batch info

class Shapes:
    """tests/pipelines/shapes.py's pipelines over this test's own input topic."""

    def __init__(self, settings, suffix: str) -> None:
        self.settings, self.suffix = settings, suffix
        self.input = f"shapes_in_{suffix}"
        generate.ensure_topics(settings, {self.input: 2, f"shapes_out_{suffix}": 1, f"ranged_out_{suffix}": 1})
        self.valid: list[dict] = []
        self.malformed = 0

    def produce(self, ids: range, malformed: int = 0) -> None:
        producer = Producer(self.settings.kafka())
        for i in ids:
            value = {"id": f"id-{i}", "n": i, "tags": [f"t{i}", None, "x"], "a": i * 10, "b": f"b{i}"}
            self.valid.append(value)
            producer.produce(self.input, json.dumps(value).encode(), partition=i % 2)
        for i in range(malformed):
            producer.produce(self.input, b"not json", partition=i % 2)
        self.malformed += malformed
        assert producer.flush(30) == 0

    def cli(self, *args: str, shape: str = "1", batch: int = 1000, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "eosbatch.cli", *args],
                              env={**os.environ, "EOSBATCH_PIPELINES": "tests.pipelines.shapes",
                                   "EOSBATCH_TEST_SUFFIX": self.suffix, "EOSBATCH_TEST_SHAPE": shape,
                                   "EOSBATCH_TEST_BATCH": str(batch), "PYTHONPATH": str(ROOT), **env},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600, cwd=ROOT)

    def rows(self, table: str, columns: str) -> list[tuple]:
        with store.transaction(self.settings) as cur:
            cur.execute(sql.SQL(f"SELECT {columns} FROM {{}} ORDER BY 1").format(  # noqa: S608 - the test's own
                sql.Identifier("public", f"{table}_{self.suffix}")))
            return cur.fetchall()

    def types(self, table: str) -> dict[str, str]:
        with store.transaction(self.settings) as cur:
            return sinks.table_types(cur, sql.Identifier("public", f"{table}_{self.suffix}"))

    def assert_counts(self, pipeline: str, sink_rows: int, per_record: int = 1) -> list[dict]:
        """input vs sink vs read_committed output vs dead letters; the output's rows."""
        name = f"{pipeline}_{self.suffix}"
        records = read_topic(self.settings, f"{pipeline}_out_{self.suffix}")
        check = check_output(self.settings, name, f"{pipeline}_out_{self.suffix}", records)
        assert check.ok, check
        with store.transaction(self.settings) as cur:
            cur.execute("SELECT count(*) FROM eosbatch.dead_letters WHERE pipeline = %s", (name,))
            dead = cur.fetchone()[0]
        assert sink_rows == len(self.valid) == len(records) // per_record and dead == self.malformed
        return [json.loads(r.value) for r in records]


@pytest.mark.spark
def test_an_evolving_sink_adds_columns_stores_structs_as_jsonb_and_arrays_and_refuses_a_retyped_column(
        settings, unique):
    shapes = Shapes(settings, unique)
    shapes.produce(range(4), malformed=1)
    ok(shapes.cli("run", f"shapes_{unique}"))
    assert list(shapes.types("shapes")) == ["id", "n", "partition", "offset"]

    shapes.produce(range(4, 8))  # n made a struct: the sink's integer cannot take it, and nothing changes
    refused = shapes.cli("run", f"shapes_{unique}", shape="3")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"sink.evolve: column 'n' of public.shapes_{unique} is integer, and the transform now returns jsonb" \
        in refused.stderr
    assert list(shapes.types("shapes")) == ["id", "n", "partition", "offset"]

    # the transform adds a struct and an array column: the same records, in the next batch
    log = ok(shapes.cli("run", f"shapes_{unique}", shape="2", EOSBATCH_EARLY_PUBLISH="1"))
    assert "sink.evolve added column(s) ['detail', 'tags', 'm']" in log
    assert "not published early (it added column(s) ['detail', 'tags', 'm'] to the sink)" in log
    assert shapes.types("shapes") == {"id": "text", "n": "integer", "partition": "integer", "offset": "bigint",
                                      "detail": "jsonb", "tags": "text[]", "m": "jsonb"}
    assert shapes.rows("shapes", "id, detail, tags, m")[3:5] == [
        ("id-3", None, None, None), ("id-4", {"a": 40, "b": "b4"}, ["t4", None, "x"], {"a": 40})]
    output = shapes.assert_counts("shapes", len(shapes.rows("shapes", "id")))
    assert {r["id"]: (r.get("detail"), r.get("tags")) for r in output}["id-7"] == ({"a": 70, "b": "b7"},
                                                                                   ["t7", None, "x"])


def test_without_evolve_a_new_column_names_the_option(settings, unique):
    pipeline = Pipeline(name=f"noevolve_{unique}", source=KafkaSource(topics=["t"]), transform=lambda df: df,
                        sink=PostgresSink(table=f"noevolve_{unique}", key=["k"]))
    table = sql.Identifier("public", f"noevolve_{unique}")
    try:
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("CREATE TABLE {} (k text PRIMARY KEY)").format(table))
        with store.transaction(settings) as cur, pytest.raises(SinkError) as refused:
            sinks.ensure_tables(cur, pipeline, [sinks.Column("k", "text"), sinks.Column("extra", "jsonb")])
        assert f"sink.table: public.noevolve_{unique} has no column(s) ['extra']" in str(refused.value)
        assert "PostgresSink(evolve=True)" in str(refused.value)
    finally:
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))


def test_evolve_waits_for_the_sink_s_lock_only_so_long_then_the_batch_is_retried(settings, unique, monkeypatch):
    """ADD COLUMN needs the table to itself: behind a reader's open transaction it gives up after the lock
    timeout (a transient error: the batch is tried again), instead of queueing every other reader behind it."""
    pipeline = Pipeline(name=f"evolving_{unique}", source=KafkaSource(topics=["t"]), transform=lambda df: df,
                        sink=PostgresSink(table=f"evolving_{unique}", key=["k"], evolve=True))
    table = sql.Identifier("public", f"evolving_{unique}")
    columns = [sinks.Column("k", "text"), sinks.Column("added", "jsonb")]
    monkeypatch.setattr(evolve, "EVOLVE_LOCK_TIMEOUT", "200ms")
    reader = store.connect(settings)
    try:
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("CREATE TABLE {} (k text PRIMARY KEY)").format(table))
        with reader.cursor() as held:
            held.execute(sql.SQL("SELECT count(*) FROM {}").format(table))  # its lock lasts until it ends
            with pytest.raises(TransientError, match=r"^sink\.evolve: public\.evolving_\w+ stayed locked for 200ms"):
                sinks.evolve_sink(settings, pipeline, columns)
        reader.rollback()
        assert sinks.evolve_sink(settings, pipeline, columns) == ["added"]
        assert sinks.evolve_sink(settings, pipeline, columns) == []  # added once
    finally:
        reader.close()
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))


@pytest.mark.spark
def test_append_with_batch_info_stores_each_row_once_a_replay_adds_nothing_and_verify_recomputes_it(
        settings, unique):
    """ranged_<suffix> makes two rows of each record, with its batch's range start; five records a batch make
    two batches, published early. Running the committed ranges again (backfill --mode reprocess --publish)
    numbers the same records' rows the same way: nothing is stored or published twice. verify's recompute,
    given each committed batch's own ranges, finds the same rows."""
    shapes = Shapes(settings, unique)
    shapes.produce(range(7), malformed=1)
    pipeline = f"ranged_{unique}"
    log = ok(shapes.cli("run", pipeline, batch=5, EOSBATCH_EARLY_PUBLISH="1"))
    assert log.count("(produced while it committed)") == 2  # an append batch publishes early: its rows are new
    with store.transaction(settings) as cur:
        cur.execute("SELECT id FROM eosbatch.batches WHERE pipeline = %s AND state = 'published'", (pipeline,))
        ranges = [r for (batch_id,) in cur.fetchall() for r in store.get_batch(cur, batch_id).ranges]
        ends = positions.next_offsets(cur, pipeline)
    assert len(ranges) > 2  # two batches, each with a range of each partition
    columns = 'id, "partition", "offset", range_start, row_in_record'
    rows = shapes.rows("ranged", columns)
    for id_, partition, offset, start, number in rows:
        [found] = [r for r in ranges if r.partition == partition and r.start <= offset < r.end]
        assert start == found.start and number == (2 if id_.endswith("-copy") else 1)  # "id-1" < "id-1-copy"
    shapes.assert_counts("ranged", len(rows) // 2, per_record=2)

    every = [f"--range={tp.topic}:{tp.partition}:0-{end}" for tp, end in ends.items()]
    ok(shapes.cli("backfill", pipeline, *every, "--mode", "reprocess", "--publish", batch=5))
    with store.transaction(settings) as cur:
        cur.execute("SELECT sink_rows, outbox_records FROM eosbatch.batches WHERE pipeline = %s AND kind = "
                    "'reprocess' AND state = 'published'", (pipeline,))
        replayed = cur.fetchall()
    assert replayed and set(replayed) == {(0, 0)}  # no row stored, no record published
    assert shapes.rows("ranged", columns) == rows
    shapes.assert_counts("ranged", len(rows) // 2, per_record=2)
    ok(shapes.cli("verify", pipeline, batch=5))
