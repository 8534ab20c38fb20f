"""The typed outbox (ledger revision 0008): the commit stores each output record's columns, publish renders
the JSON. The records must be byte for byte what the commit rendered when the outbox held JSON, whatever
the columns hold, and a changed transform must never retype a column a committed batch still waits on."""

from __future__ import annotations

import pytest
from psycopg2 import sql

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink
from eosbatch.ledger import lanes, sinks, store
from eosbatch.ledger.exceptions import SinkError
from tests.integration.test_output_size import COLUMNS, ROWS

pytestmark = [pytest.mark.integration]

# A sink the user created, with types narrower than the ones eosbatch stages (typmods the outbox drops).
# char(5): an older outbox typed it `character`, which is char(1), and refused any longer value.
USER_TYPES = {"n2": "numeric(12, 2)", "vc": "varchar(40)", "ts3": "timestamp(3) with time zone",
              "c5": "character(5)"}
USER_ROWS = [("12.5", "short", "2024-02-29 12:34:56.789+00", "ab"), ("-0.01", "", "1970-01-01 00:00:00+00", ""),
             (None, None, None, None), ("9999999999.99", "v" * 40, "2024-02-29 12:34:56.7894+05:45", "abcde"),
             ("0", "x", "2000-01-01 00:00:00+00", "x"), (None, None, None, None)]


def _pipeline(unique: str) -> Pipeline:
    return Pipeline(name=f"typed_{unique}", source=KafkaSource(topics=[f"typed_in_{unique}"]),
                    transform=lambda df: df, sink=PostgresSink(table=f"typed_{unique}", key=["k"]),
                    output=KafkaOutput(topic=f"typed_out_{unique}", key="k"))


def test_records_published_from_the_typed_outbox_are_the_ones_the_commit_rendered(settings, unique) -> None:
    pipeline = _pipeline(unique)
    sink = sql.Identifier("public", f"typed_{unique}")
    types = {**COLUMNS, **USER_TYPES, "partition": "integer", "offset": "bigint"}
    names = list(types)
    rows = [(*row, *user, i % 3, 1000 + i) for i, (row, user) in enumerate(zip(ROWS, USER_ROWS, strict=True))]
    rows = [(f"k{i}", *row[1:]) for i, row in enumerate(rows)]  # a key per row (ROWS has a NULL one)
    listed = sql.SQL(", ").join(map(sql.Identifier, names))
    try:
        with store.transaction(settings) as cur:
            cur.execute("SET LOCAL TimeZone = 'Asia/Kathmandu'")  # minutes in the offset: the longest rendering
            cur.execute(sql.SQL("CREATE TABLE {} ({})").format(sink, sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in types.items())))
            for row in rows:
                cur.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                    sink, listed, sql.SQL(", ").join(sql.Placeholder() * len(names))), row)
            # What the commit rendered before 0008: row_to_json of the rows as the upsert returned them.
            cur.execute(sql.SQL("SELECT c.k, row_to_json(c.*)::text FROM (SELECT {} FROM {}) c").format(listed, sink))
            before = dict(cur.fetchall())
            # What it does now: the outbox typed as the records are, filled from the same rows, read by publish.
            table = sinks.ensure_outbox(cur, pipeline, sinks.result_columns(
                cur, sql.SQL("SELECT {} FROM {}").format(listed, sink), {}))
            cur.execute(sql.SQL("INSERT INTO {} SELECT 7, row_number() OVER (), {} FROM {}").format(
                table, listed, sink))
            cur.execute(sinks.outbox_query(pipeline, names), (7,))
            published = cur.fetchall()
    finally:
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}, {}").format(sink, sinks.outbox_table(pipeline)))
    assert len(published) == len(rows) and len(before) == len(rows)
    assert sorted(int(seq) for seq, *_ in published) == list(range(1, len(rows) + 1))
    for _, key, topic, partition, offset, value in published:
        assert value == before[key]
        assert topic is None  # one source topic: publish names it, as before
        assert (int(partition), int(offset)) in {(r[-2], r[-1]) for r in rows if r[0] == key}
    assert any(len(v) > 5_000 for v in before.values())  # the escaped, large rows are among them


def test_a_column_a_committed_batch_waits_on_is_never_retyped(settings, unique) -> None:
    pipeline = _pipeline(unique)
    first = [sinks.Column("k", "text"), sinks.Column("amount", "double precision")]
    retyped = [sinks.Column("k", "text"), sinks.Column("amount", "numeric"), sinks.Column("added", "bigint")]
    table = sinks.outbox_table(pipeline)
    try:
        with store.transaction(settings) as cur:
            sinks.ensure_outbox(cur, pipeline, first)
            lanes.lock_pipeline(cur, pipeline.name)
            batch = store.create_batch(cur, pipeline.name, "regular", 0, [], "g")
            cur.execute("UPDATE eosbatch.batches SET state = 'committed' WHERE id = %s", (batch.id,))
            cur.execute(sql.SQL("INSERT INTO {} VALUES (%s, 1, 'a', 1.5)").format(table), (batch.id,))
        with pytest.raises(SinkError, match="'amount' changed type to numeric.*double precision"), \
                store.transaction(settings) as cur:
            sinks.ensure_outbox(cur, pipeline, retyped)
        with store.transaction(settings) as cur:  # published: its rows, if still there, wait for a TRUNCATE
            cur.execute("UPDATE eosbatch.batches SET state = 'published' WHERE id = %s", (batch.id,))
            sinks.ensure_outbox(cur, pipeline, retyped)
            assert sinks.table_types(cur, table) == {"_eosbatch_batch": "bigint", "_eosbatch_seq": "bigint",
                                                      "k": "text", "amount": "numeric", "added": "bigint"}
    finally:
        with store.transaction(settings) as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))


# What eosbatch stages for the user's narrower columns (spark.schema's types).
STAGED_AS = {"n2": "numeric", "vc": "text", "ts3": "timestamp with time zone", "c5": "text"}


def test_the_early_publish_query_renders_from_staging_what_the_commit_puts_in_the_outbox(settings, unique) -> None:
    """EOSBATCH_EARLY_PUBLISH produces a batch's records from staging while the commit runs, and keeps them
    only if the outbox holds as many: they must then be the outbox's records byte for byte (the sink's
    typmods applied: 12.5 stored as numeric(12,2) is 12.50, a timestamp(3) loses its fourth digit), with
    only seq numbered otherwise. A sink with a trigger of its own may change what it stores: no early query."""
    pipeline = _pipeline(unique)
    sink = sql.Identifier("public", f"typed_{unique}")
    types = {**COLUMNS, **USER_TYPES, "partition": "integer", "offset": "bigint"}
    staged = [sinks.Column(n, STAGED_AS.get(n, t)) for n, t in types.items()]
    names = list(types)
    rows = [(f"k{i}", *row[1:], *user, i % 3, 1000 + i)
            for i, (row, user) in enumerate(zip(ROWS, USER_ROWS, strict=True))]
    connection = store.connect(settings)
    try:
        with connection.cursor() as cur:
            cur.execute("SET TimeZone = 'Asia/Kathmandu'")
            cur.execute(sql.SQL("CREATE TABLE {} ({}, UNIQUE (k))").format(sink, sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in types.items())))
            sinks.ensure_tables(cur, pipeline, staged)
            lanes.lock_pipeline(cur, pipeline.name)
            batch = store.create_batch(cur, pipeline.name, "regular", 0, [], "g")
            stage = sinks.stage_table(pipeline)
            for row in rows:
                cur.execute(sql.SQL("INSERT INTO {} ({}, {}, {}) VALUES (%s, 'w:1', {})").format(
                    stage, sql.Identifier(sinks.BATCH_COLUMN), sql.Identifier(sinks.WRITER_COLUMN),
                    sql.SQL(", ").join(map(sql.Identifier, names)), sql.SQL(", ").join(sql.Placeholder() * len(names))),
                    (batch.id, *row))
            batch = batch._replace(writers={"sink": {"w:1": len(rows)}, "columns": names})
            query, why_not = sinks.early_outbox_query(cur, pipeline, batch)
            assert query is not None, why_not
            cur.execute(query, {"batch": batch.id, "writers": ["w:1"]})
            early = cur.fetchall()
            moved = sinks.move_to_sink(cur, pipeline, batch, with_outbox=True)
            cur.execute(sinks.outbox_query(pipeline, names), (batch.id,))
            outbox = cur.fetchall()
            cur.execute(sql.SQL("SELECT n2::text FROM {} WHERE k = 'k0'").format(sink))
            assert cur.fetchone()[0] == "12.50"  # the typmod did apply
            cur.execute(sql.SQL("CREATE TRIGGER keep BEFORE INSERT ON {} FOR EACH ROW EXECUTE FUNCTION "
                                "suppress_redundant_updates_trigger()").format(sink))
            assert sinks.early_outbox_query(cur, pipeline, batch) == (None, "the sink has triggers, rules, "
                                                                      "partitions or children that may change "
                                                                      "the row it stores")
    finally:
        connection.rollback()
        connection.close()
    assert moved.outbox == len(early) == len(rows)
    assert sorted(int(seq) for seq, *_ in early) == list(range(1, len(rows) + 1))
    assert sorted(r[1:] for r in early) == sorted(r[1:] for r in outbox)  # every record, byte for byte


@pytest.mark.parametrize(("sink_sql", "early"), [
    ("CREATE TABLE {t} (k text PRIMARY KEY, v text)", True),
    # equal keys that are not the same bytes: the upsert keeps the stored spelling, the batch has its own
    ("CREATE TABLE {t} (k numeric PRIMARY KEY, v text)", False),
    ("CREATE TABLE {t} (k double precision PRIMARY KEY, v text)", False),
    # a partition (or child) may have a trigger of its own
    ("CREATE TABLE {t} (k text PRIMARY KEY, v text) PARTITION BY HASH (k)", False),
])
def test_no_early_publish_where_the_stored_key_or_row_may_differ_from_the_batch_s(settings, unique, sink_sql,
                                                                                 early) -> None:
    pipeline = _pipeline(unique)
    sink = sql.Identifier("public", f"typed_{unique}")
    key_type = "text" if "k text" in sink_sql else sink_sql.split("(k ")[1].split(" PRIMARY")[0]
    connection = store.connect(settings)
    try:
        with connection.cursor() as cur:
            cur.execute(sql.SQL(sink_sql).format(t=sink))
            if "PARTITION BY" in sink_sql:
                cur.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES WITH (MODULUS 1, REMAINDER 0)").format(
                    sql.Identifier("public", f"typed_{unique}_p0"), sink))
            sinks.ensure_tables(cur, pipeline, [sinks.Column("k", key_type), sinks.Column("v", "text")])
            lanes.lock_pipeline(cur, pipeline.name)
            batch = store.create_batch(cur, pipeline.name, "regular", 0, [], "g")
            batch = batch._replace(writers={"sink": {"w:1": 0}, "columns": ["k", "v"]})
            query, why_not = sinks.early_outbox_query(cur, pipeline, batch)
            assert (query is not None) is early
            assert (why_not is None) is early  # where it may not, the run's log line says why
    finally:
        connection.rollback()
        connection.close()
