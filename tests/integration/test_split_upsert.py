"""The commit's two forms of the upsert into a replace sink: INSERT ... ON CONFLICT, or (a sink small next to the
batch) an UPDATE of the stored keys then a plain INSERT of the others. Both must leave the same sink and the
same outbox, and a key another transaction stores or changes meanwhile must neither fail the commit nor lose the
batch's row (the split falls back to the upsert)."""

from __future__ import annotations

import threading
import time

import psycopg2
import pytest
from psycopg2 import sql

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink
from eosbatch.ledger import sinks, store

pytestmark = [pytest.mark.integration]

COLUMNS = [sinks.Column("k", "text"), sinks.Column("v", "text"), sinks.Column("partition", "integer"),
           sinks.Column("offset", "bigint")]
NEW_KEYS = 60  # 65 staged rows: a sink of 3 rows is small enough for the split (at most 1/20)
# Stored before the batch: one its row beats (same partition, later), one it does not (same partition, earlier),
# one it beats from another partition (a regular batch is later).
STORED = [("later", "stored", 2, 100), ("stale", "stored, stays", 1, 500), ("moved", "stored", 3, 10)]
STAGED = [("later", "batch", 2, 200), ("stale", "batch, older", 1, 400), ("moved", "batch", 0, 5),
          ("twice", "first", 0, 1), ("twice", "second", 0, 2),  # repeated in one partition: the later one
          *[(f"n{i}", f"new {i}", i % 4, 1000 + i) for i in range(NEW_KEYS)]]


def _pipeline(unique: str) -> Pipeline:
    return Pipeline(name=f"split_{unique}", source=KafkaSource(topics=[f"split_in_{unique}"]),
                    transform=lambda df: df, sink=PostgresSink(table=f"split_{unique}", key=["k"]),
                    output=KafkaOutput(topic=f"split_out_{unique}", key="k"))


def _prepare(cur, pipeline: Pipeline, stored: list[tuple] = STORED) -> store.Batch:
    """Sink and staging tables, the stored rows, the batch's staged rows; the batch as the commit sees it."""
    sinks.ensure_tables(cur, pipeline, COLUMNS)
    store.lock_pipeline(cur, pipeline.name)
    batch = store.create_batch(cur, pipeline.name, "regular", 0, [], "g")
    for row in stored:
        cur.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(sinks.sink_table(pipeline)), row)
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


def test_both_forms_of_the_upsert_leave_the_same_sink_and_outbox(settings, unique, monkeypatch) -> None:
    pipeline = _pipeline(unique)
    results = {}
    try:
        for split in (True, False):
            connection = psycopg2.connect(settings.psycopg_dsn)
            try:
                with connection.cursor() as cur:
                    batch = _prepare(cur, pipeline)
                    # The sample sees mostly new keys: the commit would choose the split by itself.
                    assert sinks._split_pays(cur, pipeline, batch)
                    monkeypatch.setattr(sinks, "_split_pays", lambda *_, chosen=split: chosen)
                    moved = sinks.move_to_sink(cur, pipeline, batch, with_outbox=True, max_record_bytes=1_000_000)
                    results[split] = (moved, *_after(cur, pipeline, batch))
            finally:
                connection.rollback()
                connection.close()
    finally:
        _drop(settings, pipeline)
    moved, stored, outbox = results[True]
    assert results[False] == results[True]
    assert stored["later"] == ["batch", 2, 200] and stored["moved"] == ["batch", 0, 5]
    assert stored["stale"] == ["stored, stays", 1, 500] and stored["twice"] == ["second", 0, 2]
    assert len(stored) == 4 + NEW_KEYS
    # Everything but the stale row went in and out; each outbox record once, numbered 1..n.
    assert moved.sink_rows == moved.outbox == 3 + NEW_KEYS
    assert sorted(int(seq) for seq, *_ in outbox) == list(range(1, 4 + NEW_KEYS))
    assert {key for _, key, *_ in outbox} == set(stored) - {"stale"}


def test_the_split_is_chosen_only_for_a_sink_small_next_to_the_batch(settings, unique) -> None:
    """Each key is looked up twice by the split, which only an index small next to the batch answers for
    nothing: one row more than a twentieth of the staged rows and the commit takes the upsert."""
    pipeline = _pipeline(unique)
    connection = psycopg2.connect(settings.psycopg_dsn)
    try:
        with connection.cursor() as cur:
            batch = _prepare(cur, pipeline)
            assert sinks._split_pays(cur, pipeline, batch)
            cur.execute(sql.SQL("INSERT INTO {} VALUES ('one more', 'stored', 0, 0)").format(
                sinks.sink_table(pipeline)))
            assert not sinks._split_pays(cur, pipeline, batch)
            # A batch staged by an older eosbatch (tags, no row counts): never.
            assert not sinks._split_pays(cur, pipeline, batch._replace(writers={"sink": ["w:1"]}))
    finally:
        connection.rollback()
        connection.close()
        _drop(settings, pipeline)


# What another transaction does, uncommitted, before the commit's statement; committed while the statement
# waits for it. Either way the batch's row is the later one and must be in the sink and the outbox.
MEANWHILE = {
    # the split's INSERT meets a new key stored meanwhile: a unique violation
    "stores a new key": ("INSERT INTO {} VALUES ('n7', 'another writer', 3, 1)", "n7", ["new 7", 3, 1007]),
    # the split's UPDATE finds the stored row changed (a new ctid): it skips it, the count tells
    "changes a stored row": ("UPDATE {} SET v = 'another writer', \"offset\" = 150 WHERE k = 'later'", "later",
                             ["batch", 2, 200]),
}


@pytest.mark.parametrize("meanwhile", sorted(MEANWHILE))
def test_a_key_another_transaction_writes_meanwhile_falls_back_to_the_upsert(settings, unique, meanwhile) -> None:
    """Another transaction writes a key after the split's lookup and commits while the commit's statement
    waits on that key: the commit must not fail, and the upsert that runs instead keeps the batch's row."""
    statement, key, expected = MEANWHILE[meanwhile]
    pipeline = _pipeline(unique)
    connection = psycopg2.connect(settings.psycopg_dsn)
    other = psycopg2.connect(settings.psycopg_dsn)
    try:
        with store.transaction(settings) as cur:
            sinks.ensure_tables(cur, pipeline, COLUMNS)  # committed, so the other transaction can write the sink
            cur.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s, %s, %s)").format(sinks.sink_table(pipeline)),
                        STORED[0])
        with other.cursor() as cursor:  # not committed yet: the commit's sample and statements do not see it
            cursor.execute(sql.SQL(statement).format(sinks.sink_table(pipeline)))
        with connection.cursor() as cur:
            batch = _prepare(cur, pipeline, stored=STORED[1:])
            assert sinks._split_pays(cur, pipeline, batch)
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]

            def commit_the_other_once_blocked() -> None:
                deadline = time.monotonic() + 30
                with psycopg2.connect(settings.psycopg_dsn) as watcher, watcher.cursor() as look:
                    while time.monotonic() < deadline:
                        look.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,))
                        if look.fetchone()[0] == "Lock":  # the statement waits for the other's row
                            break
                        watcher.rollback()
                        time.sleep(0.05)
                other.commit()

            releaser = threading.Thread(target=commit_the_other_once_blocked)
            releaser.start()
            moved = sinks.move_to_sink(cur, pipeline, batch, with_outbox=True, max_record_bytes=1_000_000)
            releaser.join()
            stored, outbox = _after(cur, pipeline, batch)
        assert stored[key] == expected  # the batch's row
        assert key in {k for _, k, *_ in outbox}
        assert moved.sink_rows == moved.outbox == 3 + NEW_KEYS
        assert sorted(int(seq) for seq, *_ in outbox) == list(range(1, 4 + NEW_KEYS))
    finally:
        connection.rollback()
        connection.close()
        other.rollback()
        other.close()
        _drop(settings, pipeline)
