"""Sink and staging tables, and the statements that move a batch's staged rows into the sink.

Identifiers come from pipeline definitions; they are validated there and always composed with
psycopg2.sql.Identifier here, never formatted into SQL text.
"""

from __future__ import annotations

from typing import NamedTuple

from psycopg2 import sql

from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.store import Cursor, table_exists
from eosbatch.pipeline import Pipeline

BATCH_COLUMN = "_eosbatch_batch"
WRITER_COLUMN = "_eosbatch_writer"


class Column(NamedTuple):
    name: str
    pg_type: str  # one of the types produced by eosbatch.spark.schema.pg_type (a closed set)


def sink_table(pipeline: Pipeline) -> sql.Identifier:
    return sql.Identifier(pipeline.sink.schema, pipeline.sink.table)


def stage_table(pipeline: Pipeline) -> sql.Identifier:
    return sql.Identifier("eosbatch", f"stage_{pipeline.name}")


def order_columns(pipeline: Pipeline, columns: list[str]) -> tuple[str, ...]:
    """What decides between two rows of one key: the sink's order_by, else the source position."""
    if pipeline.sink.order_by:
        return tuple(pipeline.sink.order_by)
    if {"partition", "offset"} <= set(columns):
        return ("partition", "offset")
    return ()


def _existing_columns(cur: Cursor, table: sql.Identifier) -> dict[str, str]:
    schema, name = table.strings
    cur.execute("SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (schema, name))
    return dict(cur.fetchall())


def _unique_key_exists(cur: Cursor, table: sql.Identifier, key: tuple[str, ...]) -> bool:
    schema, name = table.strings
    cur.execute(
        """SELECT array_agg(a.attname::text ORDER BY a.attname)
             FROM pg_index i
             JOIN pg_class c ON c.oid = i.indrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
            WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indpred IS NULL
            GROUP BY i.indexrelid""", (schema, name))
    return any(sorted(row[0]) == sorted(key) for row in cur.fetchall())


def validate_columns(pipeline: Pipeline, columns: list[Column]) -> None:
    names = [c.name for c in columns]
    sink = pipeline.sink
    if missing := [k for k in sink.key if k not in names]:
        raise SinkError(f"sink.key: the transform's output lacks key column(s) {missing}; it has {names}")
    for field, wanted in (("sink.accumulate", sink.accumulate), ("sink.order_by", sink.order_by)):
        if missing := [c for c in wanted if c not in names]:
            raise SinkError(f"{field}: the transform's output lacks {missing}; it has {names}")
    if sink.mode == "accumulate" and (extra := sorted(set(names) - set(sink.key) - set(sink.accumulate))):
        raise SinkError(f"sink.accumulate: an accumulate sink takes only key and accumulated columns; "
                        f"the transform also returns {extra}")
    if pipeline.output is not None and pipeline.output.key not in names:
        raise SinkError(f"output.key: the transform's output lacks {pipeline.output.key!r}; it has {names}")


def ensure_tables(cur: Cursor, pipeline: Pipeline, columns: list[Column]) -> None:
    """Create a missing sink from the transform's schema (primary key on the key); check an existing one;
    (re)create the typed staging table for this pipeline."""
    validate_columns(pipeline, columns)
    sink, key = sink_table(pipeline), tuple(pipeline.sink.key)
    definitions = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.pg_type)) for c in columns)
    if not table_exists(cur, sink):
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(pipeline.sink.schema)))
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
            sink, definitions, sql.SQL(", ").join(map(sql.Identifier, key))))
    else:
        existing = _existing_columns(cur, sink)
        if missing := [c.name for c in columns if c.name not in existing]:
            raise SinkError(f"sink.table: {pipeline.sink.schema}.{pipeline.sink.table} has no column(s) {missing} "
                            f"that the transform returns (it has {list(existing)})")
        if not _unique_key_exists(cur, sink, key):
            raise SinkError(f"sink.key: {pipeline.sink.schema}.{pipeline.sink.table} has no primary key or "
                            f"unique index on exactly {list(key)}; an idempotent upsert needs one")
    stage = stage_table(pipeline)
    wanted = {c.name: c for c in columns}
    if table_exists(cur, stage):
        present = set(_existing_columns(cur, stage)) - {BATCH_COLUMN, WRITER_COLUMN}
        if present == set(wanted):
            return
        cur.execute(sql.SQL("DROP TABLE {}").format(stage))  # staging holds nothing a new schema could use
    # UNLOGGED: staging is rebuilt from Kafka after a crash anyway, so it need not pay for WAL.
    cur.execute(sql.SQL("CREATE UNLOGGED TABLE {} ({} bigint NOT NULL, {} text NOT NULL, {})").format(
        stage, sql.Identifier(BATCH_COLUMN), sql.Identifier(WRITER_COLUMN), definitions))
    cur.execute(sql.SQL("CREATE INDEX ON {} ({}, {})").format(
        stage, sql.Identifier(BATCH_COLUMN), sql.Identifier(WRITER_COLUMN)))


def stage_columns(cur: Cursor, pipeline: Pipeline) -> list[str]:
    stage = stage_table(pipeline)
    if not table_exists(cur, stage):
        return []
    return [c for c in _existing_columns(cur, stage) if c not in (BATCH_COLUMN, WRITER_COLUMN)]


def _staged(pipeline: Pipeline) -> sql.Composed:
    return sql.SQL("FROM {} WHERE {} = %(batch)s AND {} = ANY(%(writers)s)").format(
        stage_table(pipeline), sql.Identifier(BATCH_COLUMN), sql.Identifier(WRITER_COLUMN))


def _select(pipeline: Pipeline, columns: list[str]) -> tuple[sql.Composed, list[str]]:
    """The batch's result rows, one per key: what the sink takes and what the output publishes.

    replace: the successful writers' rows, the last of each key by order; accumulate: the batch's sums
    per key (the deltas that the upsert adds to the stored totals)."""
    key_list = sql.SQL(", ").join(map(sql.Identifier, pipeline.sink.key))
    if pipeline.sink.mode == "accumulate":
        out = [*pipeline.sink.key, *pipeline.sink.accumulate]
        sums = sql.SQL(", ").join(sql.SQL("sum({c}) AS {c}").format(c=sql.Identifier(c))
                                  for c in pipeline.sink.accumulate)
        return sql.SQL("SELECT {}, {} {} GROUP BY {}").format(key_list, sums, _staged(pipeline), key_list), out
    order = order_columns(pipeline, columns)
    order_by = sql.SQL(", ").join([*map(sql.Identifier, pipeline.sink.key),
                                   *(sql.SQL("{} DESC").format(sql.Identifier(c)) for c in order)])
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    return sql.SQL("SELECT DISTINCT ON ({}) {} {} ORDER BY {}").format(
        key_list, names, _staged(pipeline), order_by), columns


def upsert(cur: Cursor, pipeline: Pipeline, batch_id: int, writers: list[str]) -> int:
    """Move the successful writers' staged rows into the sink in one statement; returns rows written."""
    columns = stage_columns(cur, pipeline)
    if not columns:
        return 0
    params = {"batch": batch_id, "writers": writers}
    select, out = _select(pipeline, columns)
    if pipeline.sink.mode == "replace" and not order_columns(pipeline, columns):
        _refuse_duplicate_keys(cur, pipeline, sql.SQL(", ").join(map(sql.Identifier, pipeline.sink.key)), params)
    key_list = sql.SQL(", ").join(map(sql.Identifier, pipeline.sink.key))
    others = [c for c in out if c not in pipeline.sink.key]
    if pipeline.sink.mode == "accumulate":
        action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
            sql.SQL("{c} = COALESCE(s.{c}, 0) + COALESCE(EXCLUDED.{c}, 0)").format(c=sql.Identifier(c))
            for c in others))
    elif others:
        action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in others))
        if order := order_columns(pipeline, columns):
            # A backfill commits old data after new data: a stored row from a later position stays.
            stored = sql.SQL(", ").join(sql.SQL("s.{}").format(sql.Identifier(c)) for c in order)
            incoming = sql.SQL(", ").join(sql.SQL("EXCLUDED.{}").format(sql.Identifier(c)) for c in order)
            action += sql.SQL(" WHERE ({}) <= ({})").format(stored, incoming)
    else:
        action = sql.SQL("DO NOTHING")
    cur.execute(sql.SQL("INSERT INTO {} AS s ({}) {} ON CONFLICT ({}) {}").format(
        sink_table(pipeline), sql.SQL(", ").join(map(sql.Identifier, out)), select, key_list, action), params)
    return cur.rowcount


def outbox(cur: Cursor, pipeline: Pipeline) -> sql.Composed | None:
    """The query of a batch's output records (key as text, row as JSON); None when nothing was staged."""
    assert pipeline.output is not None
    columns = stage_columns(cur, pipeline)
    if not columns:
        return None
    select, _ = _select(pipeline, columns)
    return sql.SQL("SELECT r.{}::text, row_to_json(r)::text FROM ({}) r").format(
        sql.Identifier(pipeline.output.key), select)


def _refuse_duplicate_keys(cur: Cursor, pipeline: Pipeline, key_list: sql.Composable,
                           params: dict[str, object]) -> None:
    cur.execute(sql.SQL("SELECT {}, count(*) {} GROUP BY {} HAVING count(*) > 1 LIMIT 1").format(
        key_list, _staged(pipeline), key_list), params)
    row = cur.fetchone()
    if row is not None:
        key = dict(zip(pipeline.sink.key, row[:-1], strict=True))
        raise SinkError(f"sink.order_by: key {key} appears {row[-1]} times in one batch and nothing orders "
                        "them; keep `partition`/`offset` in the transform's output or set sink.order_by")


def copy_dead_letters(cur: Cursor, pipeline: str, batch_id: int, writers: list[str]) -> int:
    cur.execute(
        """INSERT INTO eosbatch.dead_letters (pipeline, batch_id, topic, partition, "offset", key, value, error)
           SELECT %s, batch_id, topic, partition, "offset", key, value, error
             FROM eosbatch.staged_dead_letters WHERE batch_id = %s AND writer = ANY(%s)
           ON CONFLICT (pipeline, topic, partition, "offset")
           DO UPDATE SET batch_id = EXCLUDED.batch_id, error = EXCLUDED.error, created_at = now()""",
        (pipeline, batch_id, writers))
    return cur.rowcount
