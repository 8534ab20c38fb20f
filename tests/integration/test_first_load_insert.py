"""The commit's two ways to write a replace sink: INSERT ... ON CONFLICT, or into an empty sink a plain INSERT.
Both must leave the same sink and the same outbox, and a key another transaction stores meanwhile must neither
fail the commit nor lose the batch's row (the plain INSERT falls back to the upsert)."""

from __future__ import annotations

import threading
import time

import psycopg2
import pytest
from psycopg2 import sql

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink
from eosbatch.exceptions import TerminalError
from eosbatch.ledger import lanes, sinks, store
from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import commit

pytestmark = [pytest.mark.integration]

COLUMNS = [sinks.Column("k", "text"), sinks.Column("v", "text"), sinks.Column("partition", "integer"),
           sinks.Column("offset", "bigint")]
NEW_KEYS = 30
STAGED = [("later", "first", 2, 100), ("later", "batch", 2, 200),  # repeated in one partition: the later one
          ("moved", "batch", 0, 5), *[(f"n{i}", f"new {i}", i % 4, 1000 + i) for i in range(NEW_KEYS)]]


def _pipeline(unique: str) -> Pipeline:
    return Pipeline(name=f"split_{unique}", source=KafkaSource(topics=[f"split_in_{unique}"]),
                    transform=lambda df: df, sink=PostgresSink(table=f"split_{unique}", key=["k"]),
                    output=KafkaOutput(topic=f"split_out_{unique}", key="k"))


def _prepare(cur, pipeline: Pipeline) -> store.Batch:
    """Sink and staging tables and the batch's staged rows; the batch as the commit sees it."""
    sinks.ensure_tables(cur, pipeline, COLUMNS)
    lanes.lock_pipeline(cur, pipeline.name)
    batch = store.create_batch(cur, pipeline.name, "regular", 0, [], "g")
    for row in STAGED:
        cur.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'w:1', %s, %s, %s, %s)").format(sinks.stage_table(pipeline)),
                    (batch.id, *row))
    return batch._replace(writers={"sink": {"w:1": len(STAGED)}, "columns": [c.name for c in COLUMNS]})


def _after(cur, pipeline: Pipeline, batch: store.Batch) -> tuple[dict[str, tuple], list[tuple]]:
    cur.execute(sql.SQL("SELECT k, v, partition, \"offset\" FROM {}").format(sinks.sink_table(pipeline)))
    stored = {k: rest for k, *rest in cur.fetchall()}
    cur.execute(sinks.outbox_query(pipeline, [c.name for c in COLUMNS]), (batch.id,))
    return stored, sorted(cur.fetchall())


def _drop(settings, pipeline: Pipeline) -> None:
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}, {}, {}").format(
            sinks.sink_table(pipeline), sinks.stage_table(pipeline), sinks.outbox_table(pipeline)))


def test_both_forms_leave_the_same_sink_and_outbox(settings, unique, monkeypatch) -> None:
    pipeline = _pipeline(unique)
    results = {}
    try:
        for insert in (True, False):
            connection = psycopg2.connect(settings.psycopg_dsn)
            try:
                with connection.cursor() as cur:
                    batch = _prepare(cur, pipeline)
                    # the commit would choose the INSERT by itself
                    assert sinks.insert_pays(cur, pipeline, sinks.key_columns(cur, pipeline))
                    monkeypatch.setattr(commit, "insert_pays", lambda *_, chosen=insert: chosen)
                    moved = sinks.move_to_sink(cur, pipeline, batch, with_outbox=True, max_record_bytes=1_000_000)
                    results[insert] = (moved, *_after(cur, pipeline, batch))
            finally:
                connection.rollback()
                connection.close()
    finally:
        _drop(settings, pipeline)
    moved, stored, outbox = results[True]
    assert results[False] == results[True]
    assert stored["later"] == ["batch", 2, 200] and stored["moved"] == ["batch", 0, 5]
    assert len(stored) == 2 + NEW_KEYS
    # Each outbox record once, numbered 1..n.
    assert moved.sink_rows == moved.outbox == 2 + NEW_KEYS
    assert sorted(int(seq) for seq, *_ in outbox) == list(range(1, 3 + NEW_KEYS))
    assert {key for _, key, *_ in outbox} == set(stored)


def test_the_plain_insert_is_chosen_only_for_an_empty_sink(settings, unique) -> None:
    """Into a sink that holds rows the stored keys would have to be looked up: the commit takes the upsert."""
    pipeline = _pipeline(unique)
    connection = psycopg2.connect(settings.psycopg_dsn)
    try:
        with connection.cursor() as cur:
            _prepare(cur, pipeline)
            assert sinks.insert_pays(cur, pipeline, sinks.key_columns(cur, pipeline))
            cur.execute(sql.SQL("INSERT INTO {} VALUES ('stored', 'v', 0, 0)").format(sinks.sink_table(pipeline)))
            assert not sinks.insert_pays(cur, pipeline, sinks.key_columns(cur, pipeline))
    finally:
        connection.rollback()
        connection.close()
        _drop(settings, pipeline)


def test_a_key_another_transaction_stores_meanwhile_falls_back_to_the_upsert(settings, unique) -> None:
    """Another transaction stores a key after the commit found the sink empty and commits while the commit's
    INSERT waits on that key: a unique violation, which must not fail the commit. The upsert runs instead,
    and the batch's row (from another partition, a later batch) wins there."""
    pipeline = _pipeline(unique)
    connection = psycopg2.connect(settings.psycopg_dsn)
    other = psycopg2.connect(settings.psycopg_dsn)
    try:
        with store.transaction(settings) as cur:
            sinks.ensure_tables(cur, pipeline, COLUMNS)  # committed, so the other transaction can write the sink
        with other.cursor() as cursor:  # not committed yet: the commit's check and statement do not see it
            cursor.execute(sql.SQL("INSERT INTO {} VALUES ('n7', 'another writer', 3, 1)").format(
                sinks.sink_table(pipeline)))
        with connection.cursor() as cur:
            batch = _prepare(cur, pipeline)
            assert sinks.insert_pays(cur, pipeline, sinks.key_columns(cur, pipeline))
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]

            blocked: list[bool] = []

            def commit_the_other_once_blocked() -> None:
                deadline = time.monotonic() + 30
                with psycopg2.connect(settings.psycopg_dsn) as watcher, watcher.cursor() as look:
                    while time.monotonic() < deadline:
                        look.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,))
                        if look.fetchone()[0] == "Lock":  # the INSERT waits for the other's n7
                            blocked.append(True)
                            break
                        watcher.rollback()
                        time.sleep(0.05)
                other.commit()

            releaser = threading.Thread(target=commit_the_other_once_blocked)
            releaser.start()
            moved = sinks.move_to_sink(cur, pipeline, batch, with_outbox=True, max_record_bytes=1_000_000)
            releaser.join()
            assert blocked, "the batch's INSERT never waited for the other writer's row: no race was tested"
            stored, outbox = _after(cur, pipeline, batch)
        assert stored["n7"] == ["new 7", 3, 1007]  # the batch's row
        assert "n7" in {k for _, k, *_ in outbox}
        assert moved.sink_rows == moved.outbox == 2 + NEW_KEYS
        assert sorted(int(seq) for seq, *_ in outbox) == list(range(1, 3 + NEW_KEYS))
    finally:
        connection.rollback()
        connection.close()
        other.rollback()
        other.close()
        _drop(settings, pipeline)


@pytest.mark.parametrize("insert", [True, False], ids=["insert", "upsert"])
def test_rows_the_sink_refuses_are_a_terminal_error_naming_the_sink(settings, unique, monkeypatch, insert) -> None:
    """A NULL key (the transform let one through) can never go in: SinkError, terminal, naming the sink and
    PostgreSQL's reason, not the driver's error that a retry would meet again and again."""
    pipeline = _pipeline(unique)
    monkeypatch.setattr(commit, "insert_pays", lambda *_: insert)
    connection = psycopg2.connect(settings.psycopg_dsn)
    try:
        with connection.cursor() as cur:
            batch = _prepare(cur, pipeline)
            cur.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'w:1', NULL, 'no key', 1, 7)").format(
                sinks.stage_table(pipeline)), (batch.id,))
            batch = batch._replace(writers={**batch.writers, "sink": {"w:1": len(STAGED) + 1}})
            with pytest.raises(SinkError, match=rf'sink {pipeline.sink.table}: .*null value in column "k".*'
                                                r"\[SQLSTATE 23502\]") as refused:
                sinks.move_to_sink(cur, pipeline, batch, with_outbox=True, max_record_bytes=1_000_000)
            assert isinstance(refused.value, TerminalError)
    finally:
        connection.rollback()
        connection.close()
        _drop(settings, pipeline)
