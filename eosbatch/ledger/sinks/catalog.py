"""What the database says about a pipeline's tables, read once into a plain value (SinkShape) that the SQL
builders take: the sink's columns and types, its unique keys and what may change the rows it stores, the key
columns as staging and the sink declare them, and the staging and outbox tables' columns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from psycopg2 import sql

from eosbatch.ledger.sinks.names import (
    BATCH_COLUMN,
    DELETED_COLUMN,
    WRITER_COLUMN,
    Column,
    outbox_table,
    sink_table,
    stage_table,
)
from eosbatch.ledger.store import Batch, Cursor
from eosbatch.pipeline import Pipeline

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


@dataclass(frozen=True)
class SinkShape:
    """A pipeline's tables as the catalog describes them (empty mappings: the table does not exist)."""
    sink_exists: bool
    sink_types: Mapping[str, str]         # column -> type as declared, typmods included, in column order
    unique_keys: tuple[tuple[str, ...], ...]  # each unique index's columns (sorted) where it has no predicate
    rewrites_rows: bool                   # partitioned, with children, triggers or rules: may store another row
    keys: KeyColumns
    nondeterministic_key: bool            # a stored key column has a nondeterministic collation
    stage_types: Mapping[str, str]        # column -> information_schema.columns.data_type, in column order
    outbox_types: Mapping[str, str]       # column -> type as declared, typmods included

    def has_unique_key(self, key: Sequence[str]) -> bool:
        return tuple(sorted(key)) in self.unique_keys

    @property
    def stage_columns(self) -> list[str]:
        """The staging table's sink columns (none when it does not exist)."""
        return [c for c in self.stage_types if c not in (BATCH_COLUMN, WRITER_COLUMN, DELETED_COLUMN)]

    def batch_columns(self, batch: Batch) -> list[str]:
        """The columns this batch staged (recorded at `staged`), or for an older batch all staging columns."""
        return batch.staged_columns if batch.staged_columns is not None else self.stage_columns


def read(cur: Cursor, pipeline: Pipeline) -> SinkShape:
    """The pipeline's tables as they are now."""
    sink = sink_table(pipeline)
    schema, name = sink.strings
    cur.execute("SELECT c.relkind = 'p' OR c.relhassubclass OR EXISTS (SELECT FROM pg_trigger t WHERE "
                "t.tgrelid = c.oid AND NOT t.tgisinternal) OR EXISTS (SELECT FROM pg_rewrite r WHERE "
                "r.ev_class = c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s", (schema, name))
    found = cur.fetchone()
    keys = key_columns(cur, pipeline)
    return SinkShape(sink_exists=found is not None, sink_types=table_types(cur, sink) if found else {},
                     unique_keys=_unique_keys(cur, sink) if found else (),
                     rewrites_rows=bool(found and found[0]), keys=keys,
                     nondeterministic_key=_nondeterministic(cur, [k.collation for k in keys.stored.values()]),
                     stage_types=existing_columns(cur, stage_table(pipeline)),
                     outbox_types=table_types(cur, outbox_table(pipeline)))


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


def _nondeterministic(cur: Cursor, collations: list[int]) -> bool:
    collations = [c for c in collations if c]
    if not collations:
        return False
    cur.execute("SELECT count(*) FILTER (WHERE NOT collisdeterministic) FROM pg_collation WHERE oid = ANY(%s)",
                (collations,))
    return bool(cur.fetchone()[0])


def _unique_keys(cur: Cursor, table: sql.Identifier) -> tuple[tuple[str, ...], ...]:
    schema, name = table.strings
    cur.execute(
        """SELECT array_agg(a.attname::text ORDER BY a.attname)
             FROM pg_index i
             JOIN pg_class c ON c.oid = i.indrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey)
            WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indpred IS NULL
            GROUP BY i.indexrelid""", (schema, name))
    return tuple(tuple(sorted(row[0])) for row in cur.fetchall())


def existing_columns(cur: Cursor, table: sql.Identifier) -> dict[str, str]:
    """A table's columns as information_schema.columns spells their types (none: no such table)."""
    schema, name = table.strings
    cur.execute("SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (schema, name))
    return dict(cur.fetchall())


def table_types(cur: Cursor, table: sql.Identifier) -> dict[str, str]:
    """A table's columns and their types as declared (typmods included: an outbox column made char(1) by an
    older eosbatch differs from `bpchar`, and is retyped)."""
    schema, name = table.strings
    cur.execute("SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
                "ORDER BY a.attnum", (schema, name))
    return dict(cur.fetchall())


def result_columns(cur: Cursor, query: sql.Composable, params: dict[str, object]) -> list[Column]:
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
