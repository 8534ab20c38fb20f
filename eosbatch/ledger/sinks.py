"""Sink and staging tables, and the statements that move a batch's staged rows into the sink.

Identifiers come from pipeline definitions; they are validated there and always composed with
psycopg2.sql.Identifier here, never formatted into SQL text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from eosbatch.ledger.cleanup import OPEN_BATCH_IDS, open_batch_params, table_exists
from eosbatch.ledger.errors import first_line
from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.store import Batch, Cursor
from eosbatch.pipeline import Pipeline
from eosbatch.protocol.states import BatchKind, lane

BATCH_COLUMN = "_eosbatch_batch"
WRITER_COLUMN = "_eosbatch_writer"
SEQ_COLUMN = "_eosbatch_seq"  # an output record's place in its batch's typed outbox
AMBIGUOUS_COLUMN = "_eosbatch_ambiguous"  # only in the commit statement's result rows, never stored
# SQLSTATEs that eosbatch.refuse_row raises for a result row failing a commit check (migration 0009).
AMBIGUOUS_KEY, RECORD_TOO_BIG = "EB001", "EB002"


class Column(NamedTuple):
    name: str
    pg_type: str  # one of the types produced by eosbatch.spark.schema.pg_type (a closed set)


# Staging and the outbox are emptied after every batch (mostly by TRUNCATE): a vacuum triggered by their
# inserts (to set visibility bits, freeze) is work thrown away a moment later. Dead rows (DELETE) and
# wraparound still trigger vacuums as usual.
TRANSIENT_TABLE = sql.SQL("autovacuum_vacuum_insert_threshold = -1")


def sink_table(pipeline: Pipeline) -> sql.Identifier:
    return sql.Identifier(pipeline.sink.schema, pipeline.sink.table)


def stage_table(pipeline: Pipeline) -> sql.Identifier:
    return sql.Identifier("eosbatch", f"stage_{pipeline.name}")


def outbox_table(pipeline: Pipeline) -> sql.Identifier:
    return sql.Identifier("eosbatch", f"outbox_{pipeline.name}")


def stage_copy_target(pipeline: Pipeline, columns: list[str]) -> sql.Composed:
    """`table (columns)` for COPY: explicit columns, because the staging table may hold more (another
    batch, staged with an older schema, may still be waiting for its commit)."""
    return sql.SQL("{} ({})").format(stage_table(pipeline), sql.SQL(", ").join(
        map(sql.Identifier, [BATCH_COLUMN, WRITER_COLUMN, *columns])))


def position_columns(columns: list[str]) -> tuple[str, ...]:
    """The source position the transform kept, if it kept one: (topic,) partition, offset."""
    if not {"partition", "offset"} <= set(columns):
        return ()
    return ("topic", "partition", "offset") if "topic" in columns else ("partition", "offset")


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


MAX_NAME_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1: a longer name is cut short, silently
OWN_PREFIX = "_eosbatch_"  # staging, outbox and commit columns of eosbatch's own


def validate_columns(pipeline: Pipeline, columns: list[Column]) -> None:
    """The transform's output columns, checked against the sink's definition before any table is touched;
    SinkError (terminal: the transform or the pipeline must change) names what is wrong."""
    names = [c.name for c in columns]
    sink = pipeline.sink
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise SinkError(f"sink: the transform's output has column(s) {twice} more than once (after a join?); "
                        "rename or drop the copies")
    if long := [n for n in names if len(n.encode()) > MAX_NAME_BYTES]:
        raise SinkError(f"sink: the transform's output column(s) {long} are longer than PostgreSQL's "
                        f"{MAX_NAME_BYTES} bytes, which would cut them short; rename them")
    if ours := [n for n in names if n.startswith(OWN_PREFIX)]:
        raise SinkError(f"sink: the transform's output column(s) {ours} start with {OWN_PREFIX!r}, which "
                        "eosbatch's own columns use; rename them")
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
    _ensure_stage(cur, pipeline, columns, definitions)


def _ensure_stage(cur: Cursor, pipeline: Pipeline, columns: list[Column], definitions: sql.Composable) -> None:
    """The typed staging table. A changed transform adds columns instead of dropping the table: another
    lane may have rows staged there, waiting for their commit (each batch records the columns it staged)."""
    stage = stage_table(pipeline)
    if not table_exists(cur, stage):
        # UNLOGGED: cheap, and safe only because the commit checks every writer's rows are still there
        # (a PostgreSQL crash empties unlogged tables), and nothing publish needs stays here after COMMIT.
        cur.execute(sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({} bigint NOT NULL, {} text NOT NULL, {}) "
                            "WITH ({})").format(stage, sql.Identifier(BATCH_COLUMN), sql.Identifier(WRITER_COLUMN),
                                                definitions, TRANSIENT_TABLE))
        cur.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({}, {})").format(
            sql.Identifier(f"stage_{pipeline.name}_batch"), stage, sql.Identifier(BATCH_COLUMN),
            sql.Identifier(WRITER_COLUMN)))
        return
    existing = _existing_columns(cur, stage)
    for column in columns:
        if column.name not in existing:
            cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                stage, sql.Identifier(column.name), sql.SQL(column.pg_type)))
        elif existing[column.name] != _information_schema_type(column.pg_type):
            if _open_batches_use(cur, pipeline, stage, column.name):
                raise SinkError(f"sink: column {column.name!r} changed type to {column.pg_type} while rows of "
                                f"another batch are staged with {existing[column.name]}; commit or abort them "
                                "first (`eosbatch status`, `eosbatch abort`)")
            cur.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING NULL").format(
                stage, sql.Identifier(column.name), sql.SQL(column.pg_type)))


def _open_batches_use(cur: Cursor, pipeline: Pipeline, table: sql.Identifier, column: str) -> bool:
    """Whether a batch still open has a value in `column` of the pipeline's staging table or outbox (a
    published batch's rows may wait there for a TRUNCATE: cleanup.delete_batch_rows)."""
    cur.execute(sql.SQL(f"SELECT EXISTS (SELECT 1 FROM {{}} WHERE {{}} IS NOT NULL AND {{}} = ANY("  # noqa: S608
                        f"{OPEN_BATCH_IDS}))").format(table, sql.Identifier(column), sql.Identifier(BATCH_COLUMN)),
                open_batch_params(pipeline.name))
    return bool(cur.fetchone()[0])


def _information_schema_type(pg_type: str) -> str:
    """How information_schema.columns.data_type spells one of eosbatch's staging types."""
    if pg_type.startswith("numeric"):
        return "numeric"
    return {"timestamptz": "timestamp with time zone", "timestamp": "timestamp without time zone"}.get(pg_type, pg_type)


def stage_columns(cur: Cursor, pipeline: Pipeline) -> list[str]:
    stage = stage_table(pipeline)
    if not table_exists(cur, stage):
        return []
    return [c for c in _existing_columns(cur, stage) if c not in (BATCH_COLUMN, WRITER_COLUMN)]


def batch_columns(cur: Cursor, pipeline: Pipeline, batch: Batch) -> list[str]:
    """The columns this batch staged (recorded at `staged`), or for an older batch all staging columns."""
    return batch.staged_columns if batch.staged_columns is not None else stage_columns(cur, pipeline)


# ---------------------------------------------------------------- the commit's checks

def missing_staged(cur: Cursor, pipeline: Pipeline, batch: Batch) -> list[str]:
    """What is not in staging that the batch recorded at `staged`, writer by writer; empty when all is there.

    Staging is UNLOGGED: a PostgreSQL crash (immediate stop, power cut, OOM kill, failover) empties it
    while the ledger, logged, still says `staged`. Committing then would move nothing and advance the
    offsets past the batch's records: they would be lost. So the commit proves, before it moves anything,
    that each successful writer's rows are all there."""
    problems: list[str] = []
    tables = {"sink": (stage_table(pipeline), BATCH_COLUMN, WRITER_COLUMN),
              "dead_letters": (sql.Identifier("eosbatch", "staged_dead_letters"), "batch_id", "writer")}
    for kind, (table, batch_column, writer_column) in tables.items():
        expected = batch.writer_counts(kind)
        if expected is None:
            problems.append(f"{kind}: staged by an older eosbatch that recorded no row counts")
            continue
        if not expected:
            continue
        found: dict[str, int] = {}
        if table_exists(cur, table):
            cur.execute(sql.SQL("SELECT {w}, count(*) FROM {t} WHERE {b} = %s AND {w} = ANY(%s) GROUP BY {w}").format(
                w=sql.Identifier(writer_column), t=table, b=sql.Identifier(batch_column)),
                (batch.id, sorted(expected)))
            found = {writer: int(n) for writer, n in cur.fetchall()}
        problems += [f"{kind}: writer {writer} staged {n} rows, {found.get(writer, 0)} are there"
                     for writer, n in sorted(expected.items()) if found.get(writer, 0) != n]
    return problems


def _staged(pipeline: Pipeline) -> sql.Composed:
    """The batch's staged rows."""
    return sql.SQL("FROM {} WHERE {} = %(batch)s AND {} = ANY(%(writers)s)").format(
        stage_table(pipeline), sql.Identifier(BATCH_COLUMN), sql.Identifier(WRITER_COLUMN))


def _ambiguity_flag(pipeline: Pipeline, columns: list[str]) -> sql.Composable | None:
    """Inside one batch only the order of one partition means something: the flag marks a key repeated with
    nothing to order it (no order_by; no position, or positions in different partitions). It is a window over
    the key, computed on the same sort that DISTINCT ON makes, so finding none costs no pass of its own
    (a separate GROUP BY over staging took ~1.1 s of a 1M-record commit). None: nothing can be ambiguous."""
    if pipeline.sink.mode != "replace" or pipeline.sink.order_by:
        return None
    position = position_columns(columns)
    if not position:
        return sql.SQL("count(*) OVER w > 1")
    return sql.SQL(" OR ").join(sql.SQL("min({c}) OVER w <> max({c}) OVER w").format(c=sql.Identifier(c))
                                for c in position[:-1])


def _ambiguous_key(cur: Cursor, pipeline: Pipeline, columns: list[str], params: dict[str, object]) -> SinkError:
    """The error naming one ambiguous key, once the commit's statement has flagged some (the rare path)."""
    key_list = sql.SQL(", ").join(map(sql.Identifier, pipeline.sink.key))
    position = position_columns(columns)
    if position:
        # min <> max finds a key staged from two sources in one hash aggregate (a count(DISTINCT ...) per key
        # sorts every group); the sources are counted for that key only.
        differs = sql.SQL(" OR ").join(sql.SQL("min({c}) <> max({c})").format(c=sql.Identifier(c))
                                       for c in position[:-1])
        cur.execute(sql.SQL("SELECT {k} {f} GROUP BY {k} HAVING {d} LIMIT 1").format(
            k=key_list, f=_staged(pipeline), d=differs), params)
        found = cur.fetchone()
        source = sql.SQL(", ").join(map(sql.Identifier, position[:-1]))
        match = sql.SQL(" AND ").join(sql.SQL("{} = %(key_{})s").format(sql.Identifier(k), sql.SQL(str(i)))
                                      for i, k in enumerate(pipeline.sink.key))
        cur.execute(sql.SQL("SELECT {k}, count(DISTINCT ({s})) {f} AND {m} GROUP BY {k}").format(
            k=key_list, s=source, f=_staged(pipeline), m=match),
            {**params, **{f"key_{i}": v for i, v in enumerate(found)}})
        where = "partitions"
    else:
        cur.execute(sql.SQL("SELECT {k}, count(*) {f} GROUP BY {k} HAVING count(*) > 1 LIMIT 1").format(
            k=key_list, f=_staged(pipeline)), params)
        where = "times"
    row = cur.fetchone()
    key = dict(zip(pipeline.sink.key, row[:-1], strict=True))
    return SinkError(f"sink.order_by: key {key} appears in {row[-1]} {where} of one batch and nothing orders "
                     "them; set sink.order_by (an event time or version column)"
                     + ("" if position else " or keep `partition`/`offset` in the transform's output"))


# ---------------------------------------------------------------- choosing the latest row (replace sinks)

def _in_batch_order(pipeline: Pipeline, columns: list[str]) -> list[sql.Composable]:
    """ORDER BY after the key for DISTINCT ON: the first row of each key is the batch's latest."""
    order: list[sql.Composable] = [sql.SQL("{} DESC NULLS LAST").format(sql.Identifier(c))
                                   for c in pipeline.sink.order_by]
    ordered = {*pipeline.sink.key, *pipeline.sink.order_by}
    if "offset" in position_columns(columns):
        order.append(sql.SQL("{} DESC").format(sql.Identifier("offset")))  # within a partition: the later one
        ordered.add("offset")
    # Ties (equal order_by values) break on the remaining columns, then on the staged row itself (values equal
    # to the sort and unlike in bytes: -0 and 0), so the choice never depends on scan order, and two reads of
    # the same staged rows (the commit's, an early publish's) choose the same row.
    rest = [c for c in columns if c not in ordered]
    order += [sql.SQL("{} DESC NULLS LAST").format(sql.Identifier(c)) for c in sorted(rest)]
    return [*order, sql.SQL("ctid")]


def _position_wins(columns: list[str], kind: BatchKind) -> sql.Composable:
    """Without an order_by: the higher offset of the same partition wins; across partitions a regular batch
    (a later commit) wins, while a backfill or replay only beats a lower offset of the same partition (it
    carries older data); a reprocess re-asserts its own positions."""
    position = position_columns(columns)
    if not position:
        return sql.SQL("true" if lane(kind) == "regular" or kind == "reprocess" else "false")
    same_source = sql.SQL(" AND ").join(sql.SQL("s.{c} IS NOT DISTINCT FROM EXCLUDED.{c}").format(c=sql.Identifier(c))
                                        for c in position[:-1])
    later = sql.SQL("EXCLUDED.{o} {op} s.{o}").format(o=sql.Identifier("offset"),
                                                     op=sql.SQL(">=" if kind == "reprocess" else ">"))
    if lane(kind) == "regular":
        return sql.SQL("(NOT ({}) OR {})").format(same_source, later)
    return sql.SQL("({} AND {})").format(same_source, later)


def _new_row_wins(pipeline: Pipeline, columns: list[str], kind: BatchKind) -> sql.Composable:
    """The DO UPDATE condition (the stored row is `s`, the batch's EXCLUDED): with order_by the highest value
    wins and NULL never beats a value (so a stored NULL never freezes a key); equal values fall to the
    position rule."""
    condition = _position_wins(columns, kind)
    for column in reversed(pipeline.sink.order_by):
        c = sql.Identifier(column)
        condition = sql.SQL("((s.{c} IS NULL AND EXCLUDED.{c} IS NOT NULL) OR EXCLUDED.{c} > s.{c} "
                            "OR (s.{c} IS NOT DISTINCT FROM EXCLUDED.{c} AND {rest}))").format(c=c, rest=condition)
    return condition


# ---------------------------------------------------------------- the commit's statement

class Moved(NamedTuple):
    sink_rows: int    # rows the upsert inserted or changed
    outbox: int       # output records written to the logged outbox (what publish must produce)
    too_big: int = 0  # rows whose output record would exceed the topic's limit: dead letters instead
    outbox_columns: list[str] | None = None  # the output record's columns, as the typed outbox holds them


# libc locales whose order is the bytes' order (C.UTF-8: code points, which UTF-8 bytes sort as).
BYTE_ORDER_LOCALES = ("C", "POSIX", "C.UTF-8", "C.utf8")


class KeyColumn(NamedTuple):
    type: str        # format_type(): the type with its modifier
    collation: int   # the column's collation (oid; 0 for types without one)
    bytewise: bool   # a text type whose collation is a deterministic libc locale of byte order


class KeyColumns(NamedTuple):
    """The sink key's columns as staging and the sink declare them (name -> KeyColumn)."""
    staged: dict[str, KeyColumn]
    stored: dict[str, KeyColumn]

    @property
    def bytewise(self) -> frozenset[str]:
        """The staged key columns that sort the same as bytes (COLLATE "C"). Sorted under such a locale,
        each comparison is still a strcoll() and PostgreSQL abbreviates no keys: 500,000 keys took
        0.47-0.58 s to sort under C.UTF-8, 0.23 s as bytes. Same order, same groups (such a collation calls
        strings equal only when their bytes are), and the rows still reach the sink's index in its order;
        under any other collation nothing changes."""
        return frozenset(name for name, column in self.staged.items() if column.bytewise)

    def alike(self, key: Sequence[str]) -> bool:
        """Whether staging and the sink both have every column of `key` with the same types and collations:
        one row per key in the batch is then one row per key in the sink's unique index."""
        return len(self.staged) == len(key) and self.staged == self.stored


def key_columns(cur: Cursor, pipeline: Pipeline) -> KeyColumns:
    """The key columns of the pipeline's staging table and sink (none of a table that does not exist yet),
    read in one query."""
    cur.execute("SELECT a.attrelid = to_regclass(%(stage)s), a.attname, format_type(a.atttypid, a.atttypmod), "
                "a.attcollation::int, COALESCE(a.atttypid IN ('text'::regtype, 'varchar'::regtype, "
                "'bpchar'::regtype) AND c.collisdeterministic AND CASE WHEN c.collname = 'default' THEN "
                "(SELECT d.datcollate FROM pg_database d WHERE d.datname = current_database()) ELSE c.collcollate "
                "END = ANY(%(locales)s), false) FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation "
                "WHERE a.attrelid IN (to_regclass(%(stage)s), to_regclass(%(sink)s)) AND a.attname = ANY(%(key)s) "
                "AND NOT a.attisdropped",
                {"stage": stage_table(pipeline).as_string(cur.connection), "key": list(pipeline.sink.key),
                 "sink": sink_table(pipeline).as_string(cur.connection), "locales": list(BYTE_ORDER_LOCALES)})
    found = cur.fetchall()
    return KeyColumns({name: KeyColumn(*rest) for in_stage, name, *rest in found if in_stage},
                      {name: KeyColumn(*rest) for in_stage, name, *rest in found if not in_stage})


def _batch_rows(pipeline: Pipeline, columns: list[str], flagged: bool = False,
                bytewise: frozenset[str] = frozenset()) -> tuple[sql.Composed, list[str]]:
    """The batch's result rows, one per key: replace, the latest of each key; accumulate, the sums per key.
    `flagged` adds the boolean column AMBIGUOUS_COLUMN (see _ambiguity_flag; false where nothing can be).
    `bytewise`: key columns sorted as bytes, the same order (see KeyColumns.bytewise)."""
    key_list = sql.SQL(", ").join(map(sql.Identifier, pipeline.sink.key))
    flag = _ambiguity_flag(pipeline, columns) if flagged else None
    extra = sql.SQL("")
    if flagged:
        extra = sql.SQL(", ({}) AS {}").format(sql.SQL("false") if flag is None else flag,
                                               sql.Identifier(AMBIGUOUS_COLUMN))
    if pipeline.sink.mode == "accumulate":
        out = [*pipeline.sink.key, *pipeline.sink.accumulate]
        sums = sql.SQL(", ").join(sql.SQL("sum({c}) AS {c}").format(c=sql.Identifier(c))
                                  for c in pipeline.sink.accumulate)
        return sql.SQL("SELECT {}, {}{} {} GROUP BY {}").format(
            key_list, sums, extra, _staged(pipeline), key_list), out
    sort_keys = sql.SQL(", ").join(sql.SQL('{} COLLATE "C"' if k in bytewise else "{}").format(sql.Identifier(k))
                                   for k in pipeline.sink.key)
    order = sql.SQL(", ").join([sort_keys, *_in_batch_order(pipeline, columns)])
    # The window sorts exactly as DISTINCT ON does (its whole partition as the frame), so one Sort serves both.
    window = sql.SQL("") if flag is None else sql.SQL(
        " WINDOW w AS (PARTITION BY {} ORDER BY {} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)"
    ).format(sort_keys, order)
    return sql.SQL("SELECT DISTINCT ON ({}) {}{} {}{} ORDER BY {}").format(
        sort_keys, sql.SQL(", ").join(map(sql.Identifier, columns)), extra, _staged(pipeline), window,
        order), columns


def _upsert(pipeline: Pipeline, columns: list[str], out: list[str], kind: BatchKind) -> sql.Composed:
    """INSERT ... ON CONFLICT of the batch's rows, RETURNING what the sink really took (its rows as stored)."""
    names = sql.SQL(", ").join(map(sql.Identifier, out))
    others = [c for c in out if c not in pipeline.sink.key]
    if pipeline.sink.mode == "accumulate":
        action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
            sql.SQL("{c} = COALESCE(s.{c}, 0) + COALESCE(EXCLUDED.{c}, 0)").format(c=sql.Identifier(c))
            for c in others))
    elif others:
        action = sql.SQL("DO UPDATE SET {} WHERE {}").format(sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in others),
            _new_row_wins(pipeline, columns, kind))
    else:
        action = sql.SQL("DO NOTHING")
    return sql.SQL("INSERT INTO {} AS s ({}) SELECT {} FROM batch_rows ON CONFLICT ({}) {} RETURNING {}").format(
        sink_table(pipeline), names, names, sql.SQL(", ").join(map(sql.Identifier, pipeline.sink.key)), action,
        sql.SQL(", ").join(sql.SQL("s.{}").format(sql.Identifier(c)) for c in out))


def _insert(pipeline: Pipeline, out: list[str]) -> sql.Composed:
    """A plain INSERT of the batch's rows, for an empty sink (see _insert_pays)."""
    names = sql.SQL(", ").join(map(sql.Identifier, out))
    return sql.SQL("INSERT INTO {} AS s ({}) SELECT {} FROM batch_rows RETURNING {}").format(
        sink_table(pipeline), names, names, sql.SQL(", ").join(sql.SQL("s.{}").format(sql.Identifier(c)) for c in out))


def _insert_pays(cur: Cursor, pipeline: Pipeline, keys: KeyColumns) -> bool:
    """Whether to write the batch by a plain INSERT instead of the upsert: a replace sink that holds no row
    yet (a first load, a backfill into a new table), and keys compared alike in staging and the sink (same
    types and collations: one row per key in the batch is one row per key in the sink's unique index).

    INSERT ... ON CONFLICT pays a speculative insertion per new row (a lock taken and released, one more WAL
    record): 454,000 new keys into an empty sink took 2.9-3.0 s, a plain INSERT 2.2-2.3 s. Into a sink that
    holds rows, the stored keys would have to be looked up first: an UPDATE of them then an INSERT of the
    others looked every key up twice (485,000 keys into 454,000 rows: 4.6-5.3 s, the upsert 4.2-4.3 s), and
    that lookup is a join the planner may run as a scan of the sink per row when neither table has
    statistics yet (a sink just created, staging just loaded): it once ran for 25 minutes."""
    if pipeline.sink.mode != "replace" or not keys.alike(pipeline.sink.key):
        return False
    cur.execute(sql.SQL("SELECT NOT EXISTS (SELECT FROM {})").format(sink_table(pipeline)))
    return bool(cur.fetchone()[0])


REFUSED_CLASSES = ("21", "22", "23")  # cardinality, data, integrity: the rows as they are can never go in


def _refused(pipeline: Pipeline, exc: psycopg2.Error) -> SinkError | None:
    """The sink's refusal of the batch's rows (a NULL key, a number out of range, a user's CHECK or foreign
    key) as the terminal error it is: the same rows are refused every time, so a retry only loops."""
    code = exc.pgcode or ""
    if not code.startswith(REFUSED_CLASSES) or code == "23P01":  # 23P01: the ledger's range exclusion
        return None
    detail = f" ({exc.diag.message_detail})" if exc.diag.message_detail else ""
    return SinkError(f"sink {pipeline.sink.table}: PostgreSQL refused the batch's rows: "
                     f"{exc.diag.message_primary or first_line(exc)}{detail} [SQLSTATE {code}]; the batch is "
                     "aborted: change the transform or the table, then run again")


def move_to_sink(cur: Cursor, pipeline: Pipeline, batch: Batch, with_outbox: bool,
                 max_record_bytes: int | None = None) -> Moved:
    """`_move_to_sink`; rows the sink refuses raise SinkError (the caller's transaction must roll back)."""
    try:
        return _move_to_sink(cur, pipeline, batch, with_outbox, max_record_bytes)
    except psycopg2.Error as exc:
        refused = _refused(pipeline, exc)
        if refused is None:
            raise
        raise refused from exc


def _move_to_sink(cur: Cursor, pipeline: Pipeline, batch: Batch, with_outbox: bool,
                  max_record_bytes: int | None) -> Moved:
    """Upsert the successful writers' staged rows into the sink and, in the same statement, write the output
    records into the logged outbox from what the upsert really did: a row the sink refused (an older
    version) is not published, and after COMMIT publish needs nothing from unlogged staging.

    A row whose output record would be larger than `max_record_bytes` could never be published, so it would
    block the lane for ever after COMMIT: it goes to the dead letters instead of the sink and the output.
    A key nothing orders raises SinkError: the caller's transaction must roll back.

    The rows pass once, through the upsert: a row failing either check raises inside the statement
    (eosbatch.refuse_row, migration 0009), and only then, from a savepoint, the statement that also counts
    and moves such rows runs (its extra scans made PostgreSQL materialise every row: ~1.1 s per 1M)."""
    columns = batch_columns(cur, pipeline, batch)
    if not columns or not batch.writer_tags("sink"):
        return Moved(0, 0)
    params: dict[str, object] = {"batch": batch.id, "writers": batch.writer_tags("sink")}
    keys = key_columns(cur, pipeline)
    rows, out = _batch_rows(pipeline, columns, flagged=True, bytewise=keys.bytewise)
    rows_unflagged, _ = _batch_rows(pipeline, columns, bytewise=keys.bytewise)
    names = sql.SQL(", ").join(map(sql.Identifier, out))
    accumulate = pipeline.sink.mode == "accumulate"
    output = pipeline.output if with_outbox else None
    limit = max_record_bytes if output is not None else None
    # The result rows' types: an accumulate sink publishes them (its deltas), and the size bound reads them.
    result_columns = _result_columns(cur, rows_unflagged, params) if limit is not None or (
        output is not None and accumulate) else []
    outbox = sql.SQL("SELECT 0")
    outbox_columns = None
    if output is not None:
        # Typed, not JSON: rendering every record and logging its text cost ~2 s of a 1M-record commit, the
        # run's critical path; publish renders it instead (see migration 0008).
        published_types = result_columns if accumulate else _result_columns(
            cur, sql.SQL("SELECT {} FROM {}").format(names, sink_table(pipeline)), params)
        outbox_columns = out
        # accumulate publishes the batch's deltas (every one of them is applied); replace the rows it stored.
        outbox = sql.SQL("INSERT INTO {t} ({b}, {s}, {names}) SELECT %(batch)s, row_number() OVER (), "
                         "{cols} FROM {published} c RETURNING 1").format(
            t=ensure_outbox(cur, pipeline, published_types), b=sql.Identifier(BATCH_COLUMN),
            s=sql.Identifier(SEQ_COLUMN), names=names,
            published=sql.Identifier("batch_rows" if accumulate else "changed"),
            cols=sql.SQL(", ").join(sql.SQL("c.{}").format(sql.Identifier(c)) for c in out))
    upsert = _upsert(pipeline, columns, out, batch.kind)
    fits = size = sql.SQL("true")
    if output is not None and limit is not None:
        params.update(max_bytes=limit, pipeline=pipeline.name)
        size = sql.SQL("octet_length(row_to_json(r.*)::text) + coalesce(octet_length(r.{}::text), 0)").format(
            sql.Identifier(output.key))
        # Rendering every row as JSON only to measure it cost seconds per million rows: a cheap upper bound
        # settles all but rows near the limit (CASE keeps the exact size from being computed for the rest).
        fits = sql.SQL("CASE WHEN {} <= %(max_bytes)s THEN true ELSE {} <= %(max_bytes)s END").format(
            json_size_bound(result_columns, output.key), size)

    # The common case: a row failing a check raises, so the rows are read once, by the upsert.
    key = sql.SQL("concat_ws(', ', {})").format(sql.SQL(", ").join(
        sql.SQL("r.{}::text").format(sql.Identifier(k)) for k in pipeline.sink.key))

    checked = rows_unflagged if _ambiguity_flag(pipeline, columns) is None else sql.SQL(
        "SELECT {cols} FROM ({rows}) r WHERE CASE WHEN r.{flag} THEN eosbatch.refuse_row(%(ambiguous)s, 'a key nothing "
        "orders', {key}) ELSE true END").format(
            cols=sql.SQL(", ").join(sql.SQL("r.{}").format(sql.Identifier(c)) for c in out), rows=rows,
            flag=sql.Identifier(AMBIGUOUS_COLUMN), key=key)

    def move(write: sql.Composable) -> tuple[int, int]:
        cur.execute(sql.SQL("WITH all_rows AS ({checked}), batch_rows AS (SELECT r.* FROM all_rows r WHERE CASE "
                            "WHEN {fits} THEN true ELSE eosbatch.refuse_row(%(too_big)s, 'an output record over "
                            "the limit', {key}) END), changed AS ({write}), outboxed AS ({outbox}) "
                            "SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM outboxed)").format(
            checked=checked, fits=fits, key=key, write=write, outbox=outbox),
            {**params, "ambiguous": AMBIGUOUS_KEY, "too_big": RECORD_TOO_BIG})
        changed, outboxed = cur.fetchone()
        return int(changed), int(outboxed)

    insert = _insert_pays(cur, pipeline, keys)
    cur.execute("SAVEPOINT eosbatch_move")
    try:
        if insert:
            try:
                sink_rows, outboxed = move(_insert(pipeline, out))
            except psycopg2.errors.UniqueViolation:
                # Another transaction (a writer outside eosbatch) stored one of the keys meanwhile: the upsert
                # settles that as it always did.
                cur.execute("ROLLBACK TO SAVEPOINT eosbatch_move")
                insert = False
        if not insert:
            sink_rows, outboxed = move(upsert)
        cur.execute("RELEASE SAVEPOINT eosbatch_move")
        return Moved(sink_rows, outboxed if output is not None else 0, 0, outbox_columns)
    except psycopg2.Error as exc:
        if exc.pgcode not in (AMBIGUOUS_KEY, RECORD_TOO_BIG):
            raise
        cur.execute("ROLLBACK TO SAVEPOINT eosbatch_move")
        if exc.pgcode == AMBIGUOUS_KEY:
            raise _ambiguous_key(cur, pipeline, columns, params) from None  # the caller rolls back
    assert output is not None  # only a limit refuses a record as too big

    # Some output record is over the limit: the statement that also moves such rows to the dead letters.
    plain = sql.SQL("SELECT {} FROM all_rows").format(names)  # without the ambiguity flag
    position = position_columns(out)
    topic = sql.SQL("r.{}").format(sql.Identifier("topic")) if "topic" in position else sql.Literal(
        pipeline.source.topics[0] if position else output.topic)
    # A row without one source position (an aggregate) is recorded against the output topic, partition -1.
    partition = sql.SQL("r.{}").format(sql.Identifier("partition")) if position else sql.SQL("-1")
    where = (sql.SQL("{p}, COALESCE((SELECT br.incarnation FROM eosbatch.batch_ranges br WHERE br.batch_id = "
                     "%(batch)s AND br.topic = {t} AND br.partition = {p}), 0), r.{o}").format(
                         p=partition, t=topic, o=sql.Identifier("offset")) if position
             else sql.SQL("-1, 0, -(%(batch)s::bigint * 1000000 + row_number() OVER ())"))
    too_big = sql.SQL(
        'INSERT INTO eosbatch.dead_letters (pipeline, batch_id, topic, partition, incarnation, "offset", key, '
        "value, error) "
        "SELECT %(pipeline)s, %(batch)s, {topic}, {where}, convert_to(r.{okey}::text, 'UTF8'), "
        "convert_to(row_to_json(r.*)::text, 'UTF8'), 'output record of ' || {size} || ' bytes exceeds the "
        "output topic''s limit of ' || %(max_bytes)s || ' bytes (max.message.bytes, message.max.bytes, less "
        "headers): not stored in the sink, not published' FROM ({plain}) r WHERE NOT {fits} "
        'ON CONFLICT (pipeline, topic, partition, incarnation, "offset") DO UPDATE SET '
        "batch_id = EXCLUDED.batch_id, error = EXCLUDED.error RETURNING 1").format(
            topic=topic, where=where, size=size, fits=fits, plain=plain, okey=sql.Identifier(output.key))
    cur.execute(sql.SQL("WITH all_rows AS ({rows}), batch_rows AS (SELECT r.* FROM ({plain}) r WHERE {fits}), "
                        "too_big AS ({too_big}), changed AS ({upsert}), outboxed AS ({outbox}) "
                        "SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM outboxed), "
                        "(SELECT count(*) FROM too_big), (SELECT count(*) FROM all_rows WHERE {ambiguous})").format(
        rows=rows, plain=plain, fits=fits, too_big=too_big, upsert=upsert, outbox=outbox,
        ambiguous=sql.Identifier(AMBIGUOUS_COLUMN)), params)
    sink_rows, outboxed, oversized, ambiguous = cur.fetchone()
    if ambiguous:
        raise _ambiguous_key(cur, pipeline, columns, params)  # the caller's rollback undoes the statement
    return Moved(int(sink_rows), int(outboxed), int(oversized), outbox_columns)


# The longest text (and JSON) form of a value of these types: a bound with no cast to text per row (casting
# numbers took 0.15 s of a 1M-record commit, twice). -2147483648; -9223372036854775808; shortest-exact floats
# such as -1.17549435e-38 and -2.2250738585072014e-308; "-Infinity" and "NaN" are shorter; false.
TEXT_WIDTH = {"smallint": 6, "integer": 11, "bigint": 20, "real": 15, "double precision": 24, "boolean": 5}


def json_size_bound(columns: list[Column], key: str) -> sql.Composed:
    """An upper bound of `octet_length(row_to_json(r.*)::text)` plus the key's length, from the columns' text
    lengths (for TEXT_WIDTH's types, their longest): JSON escaping makes a character at most 6 bytes (\\u00XX),
    and each column adds its quoted name, a colon, a comma and at most two quotes around its value (or
    `null`). Types render in JSON no longer than 6x their text form (timestamps gain a T, quotes and a
    longer offset; bytea doubles backslashes)."""
    fixed = 2 + sum(6 * len(c.name.encode()) + 10 + 6 * TEXT_WIDTH.get(c.pg_type, 0) for c in columns)
    lengths = [sql.SQL("coalesce(octet_length(r.{}::text), 0)").format(sql.Identifier(c.name))
               for c in columns if c.pg_type not in TEXT_WIDTH]
    key_type = next((c.pg_type for c in columns if c.name == key), None)
    key_length = sql.Literal(TEXT_WIDTH[key_type]) if key_type in TEXT_WIDTH else sql.SQL(
        "coalesce(octet_length(r.{}::text), 0)").format(sql.Identifier(key))
    return sql.SQL("({} + 6 * ({}) + {})").format(
        sql.Literal(fixed), sql.SQL(" + ").join(lengths) if lengths else sql.SQL("0"), key_length)


# ---------------------------------------------------------------- the typed outbox

def _result_columns(cur: Cursor, query: sql.Composable, params: dict[str, object]) -> list[Column]:
    """The columns a query returns, with the types PostgreSQL gives them, without typmods (which do not change
    how a value renders: a numeric keeps its own scale, a char(5) its padding), from its description: nothing
    is read. Rendered with typmod -1, "no typmod": with NULL, char and bit come out as `character` and `bit`,
    which mean char(1) and bit(1), and a longer value could never be stored."""
    cur.execute(sql.SQL("SELECT * FROM ({}) r LIMIT 0").format(query), params)
    described = [(d.name, d.type_code) for d in cur.description]
    cur.execute("SELECT oid, format_type(oid, -1) FROM pg_type WHERE oid = ANY(%s)",
                (sorted({oid for _, oid in described}),))
    types = dict(cur.fetchall())
    return [Column(name, types[oid]) for name, oid in described]


def _table_types(cur: Cursor, table: sql.Identifier) -> dict[str, str]:
    """A table's columns and their types as declared (typmods included: an outbox column made char(1) by an
    older eosbatch differs from `bpchar`, and is retyped)."""
    schema, name = table.strings
    cur.execute("SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
                "ORDER BY a.attnum", (schema, name))
    return dict(cur.fetchall())


def ensure_outbox(cur: Cursor, pipeline: Pipeline, columns: list[Column]) -> sql.Identifier:
    """The pipeline's typed outbox, with `columns` typed as the records to publish are (the sink's types for
    a replace sink, the sums' for an accumulate one), so publish renders each record as the commit would
    have. Run inside the commit, under the pipeline's lock: a changed transform adds or retypes columns; a
    column another batch still waits to publish from is never retyped."""
    table = outbox_table(pipeline)
    existing = _table_types(cur, table)
    if not existing:
        # LOGGED: after COMMIT publish reads the batch's records from here, and a crash must not lose them.
        # No index: a batch's rows are written once, read once by a scan and deleted once (migration 0007).
        definitions = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.pg_type)) for c in columns)
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({} bigint NOT NULL, {} bigint NOT NULL, {}) WITH ({})"
                            ).format(table, sql.Identifier(BATCH_COLUMN), sql.Identifier(SEQ_COLUMN), definitions,
                                     TRANSIENT_TABLE))
        return table
    for column in columns:
        name = sql.Identifier(column.name)
        if column.name not in existing:
            cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(table, name, sql.SQL(column.pg_type)))
        elif existing[column.name] != column.pg_type:
            if _open_batches_use(cur, pipeline, table, column.name):
                raise SinkError(f"sink: output column {column.name!r} changed type to {column.pg_type} while "
                                f"a committed batch still waits to publish it as {existing[column.name]}; "
                                "publish it first (`eosbatch run` or `eosbatch status`)")
            cur.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING NULL").format(
                table, name, sql.SQL(column.pg_type)))
    return table


def outbox_query(pipeline: Pipeline, columns: list[str]) -> sql.Composed:
    """Read a batch's typed outbox as publish needs it: seq, key, the record as JSON text, its source.
    row_to_json over the batch's columns, in the commit's order, renders exactly what the commit's own
    row_to_json did when the outbox held JSON (migration 0008)."""
    assert pipeline.output is not None
    return sql.SQL("SELECT q.{seq}::text, q.{okey}::text, row_to_json(r.*)::text, {src} FROM {t} q "
                   "CROSS JOIN LATERAL (SELECT {cols}) r WHERE q.{batch} = %s").format(
        seq=sql.Identifier(SEQ_COLUMN), okey=sql.Identifier(pipeline.output.key), src=_source("q", columns),
        t=outbox_table(pipeline), cols=sql.SQL(", ").join(sql.SQL("q.{}").format(sql.Identifier(c))
                                                           for c in columns),
        batch=sql.Identifier(BATCH_COLUMN))


def _source(alias: str, columns: list[str]) -> sql.Composed:
    """A published record's source topic, partition and offset as text, from `alias`'s columns where the
    transform kept them (NULL where it did not)."""
    position = position_columns(columns)
    return sql.SQL(", ").join(sql.SQL("{}.{}::text").format(sql.Identifier(alias), sql.Identifier(c))
                              if c in position else sql.SQL("NULL") for c in ("topic", "partition", "offset"))


# Key types whose equal values are identical (under a deterministic collation for the text ones): the key the
# sink keeps is then the batch's own, byte for byte (numeric 1.5 = 1.50, float 0 = -0, citext are not).
EXACT_KEY_TYPES = frozenset({"smallint", "integer", "bigint", "text", "character varying", "uuid", "date",
                             "boolean", "bytea", "timestamp without time zone", "timestamp with time zone"})


def early_outbox_query(cur: Cursor, pipeline: Pipeline, batch: Batch) -> sql.Composed | None:
    """The records the commit of this staged batch will write to its outbox, read from staging before it
    commits, rendered as `outbox_query` renders the outbox (seq, key, record, source); None where they might
    differ, so that only the outbox can say.

    Exact when every row the batch brings is stored as it is, which the caller checks after the commit (the
    outbox holds as many records as this query returns): a replace sink stores a batch row as it comes (the
    plain INSERT, or the upsert's `SET c = EXCLUDED.c` for every column), converted to the sink's column types
    exactly as these casts convert it (typmods included: a numeric(10,2) rounds the same way). Not for an
    accumulate sink (it stores sums), nor for a sink with triggers or rules of its own, or partitions or
    children that may have theirs (they may change the row it stores). And the key the upsert keeps when it
    updates a row is the stored one, so the key must be one whose equal values are the same bytes: the same
    type in staging and the sink, among EXACT_KEY_TYPES, under deterministic collations (a citext or numeric
    key, or a case-insensitive collation, would publish the batch's spelling of a key the sink spells
    otherwise). Only seq differs: it numbers the records in this query's order, a permutation."""
    if pipeline.output is None or pipeline.sink.mode != "replace":
        return None
    keys = key_columns(cur, pipeline)
    if not keys.alike(pipeline.sink.key) or any(
            re.sub(r"\(\d+(,\s*\d+)?\)", "", k.type) not in EXACT_KEY_TYPES for k in keys.stored.values()):
        return None
    collations = [k.collation for k in keys.stored.values() if k.collation]
    if collations:
        cur.execute("SELECT count(*) FILTER (WHERE NOT collisdeterministic) FROM pg_collation WHERE oid = ANY(%s)",
                    (collations,))
        if cur.fetchone()[0]:
            return None
    table = sink_table(pipeline)
    schema, name = table.strings
    cur.execute("SELECT c.relkind = 'p' OR c.relhassubclass OR EXISTS (SELECT FROM pg_trigger t WHERE "
                "t.tgrelid = c.oid AND NOT t.tgisinternal) OR EXISTS (SELECT FROM pg_rewrite r WHERE "
                "r.ev_class = c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s", (schema, name))
    found = cur.fetchone()
    if found is None or found[0]:
        return None
    columns = batch_columns(cur, pipeline, batch)
    sink_types = _table_types(cur, table)  # with typmods: the casts convert as storing does
    rows, out = _batch_rows(pipeline, columns, bytewise=keys.bytewise)
    if not columns or any(c not in sink_types for c in out):
        return None
    casts = sql.SQL(", ").join(sql.SQL("CAST(c.{n} AS {t}) AS {n}").format(n=sql.Identifier(c),
                                                                           t=sql.SQL(sink_types[c])) for c in out)
    return sql.SQL("SELECT (row_number() OVER ())::text, r.{okey}::text, row_to_json(r.*)::text, {src} "
                   "FROM ({rows}) c CROSS JOIN LATERAL (SELECT {casts}) r").format(
        okey=sql.Identifier(pipeline.output.key), src=_source("r", out), rows=rows, casts=casts)


def legacy_outbox(cur: Cursor, pipeline: Pipeline, batch: Batch) -> sql.Composed | None:
    """A batch committed by eosbatch < 0.2 has no outbox rows: its output is still computed from staging."""
    assert pipeline.output is not None
    columns = batch_columns(cur, pipeline, batch)
    if not columns:
        return None
    select, _ = _batch_rows(pipeline, columns)
    return sql.SQL("SELECT r.{}::text, row_to_json(r.*)::text FROM ({}) r").format(
        sql.Identifier(pipeline.output.key), select)


def copy_dead_letters(cur: Cursor, pipeline: str, batch_id: int, writers: list[str]) -> int:
    """Move the batch's staged dead letters; a record two writers staged (a re-run Spark stage) once."""
    cur.execute(
        """INSERT INTO eosbatch.dead_letters (pipeline, batch_id, topic, partition, incarnation, "offset", key, value,
                                              error)
           SELECT DISTINCT ON (d.topic, d.partition, d."offset")
                  %s, d.batch_id, d.topic, d.partition, COALESCE(r.incarnation, 0), d."offset", d.key, d.value, d.error
             FROM eosbatch.staged_dead_letters d
             LEFT JOIN eosbatch.batch_ranges r ON r.batch_id = d.batch_id AND r.topic = d.topic
                                              AND r.partition = d.partition
            WHERE d.batch_id = %s AND d.writer = ANY(%s)
            ORDER BY d.topic, d.partition, d."offset"
           ON CONFLICT (pipeline, topic, partition, incarnation, "offset")
           DO UPDATE SET batch_id = EXCLUDED.batch_id, error = EXCLUDED.error, created_at = now()""",
        (pipeline, batch_id, writers))
    return cur.rowcount
