"""The names of a pipeline's sink, staging and outbox tables and of eosbatch's own columns in them.

Identifiers come from pipeline definitions; they are validated there and always composed with
psycopg2.sql.Identifier here, never formatted into SQL text.
"""

from __future__ import annotations

from typing import NamedTuple

from psycopg2 import sql

from eosbatch.pipeline import Pipeline

BATCH_COLUMN = "_eosbatch_batch"
WRITER_COLUMN = "_eosbatch_writer"
SEQ_COLUMN = "_eosbatch_seq"  # an output record's place in its batch's typed outbox
AMBIGUOUS_COLUMN = "_eosbatch_ambiguous"  # only in the commit statement's result rows, never stored
# A staged row, an outbox record: a tombstone (true) or a row (false); only for a sink with deletes.
DELETED_COLUMN = "_eosbatch_deleted"
# SQLSTATEs that eosbatch.refuse_row raises for a result row failing a commit check (migration 0009).
AMBIGUOUS_KEY, RECORD_TOO_BIG = "EB001", "EB002"
MAX_NAME_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1: a longer name is cut short, silently
OWN_PREFIX = "_eosbatch_"  # staging, outbox and commit columns of eosbatch's own


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


def deleted_table(pipeline: Pipeline) -> sql.Identifier:
    """A sink with deletes: the deleted markers, one row per deleted key (docs/deletes.md)."""
    return sql.Identifier("eosbatch", f"deleted_{pipeline.name}")


def stage_copy_target(pipeline: Pipeline, columns: list[str]) -> sql.Composed:
    """`table (columns)` for COPY: explicit columns, because the staging table may hold more (another
    batch, staged with an older schema, may still be waiting for its commit)."""
    return sql.SQL("{} ({})").format(stage_table(pipeline), sql.SQL(", ").join(
        map(sql.Identifier, [BATCH_COLUMN, WRITER_COLUMN, *columns])))


def staged_rows(pipeline: Pipeline) -> sql.Composed:
    """FROM ... WHERE of the batch's staged rows (parameters `batch` and `writers`)."""
    return sql.SQL("FROM {} WHERE {} = %(batch)s AND {} = ANY(%(writers)s)").format(
        stage_table(pipeline), sql.Identifier(BATCH_COLUMN), sql.Identifier(WRITER_COLUMN))


def position_columns(columns: list[str]) -> tuple[str, ...]:
    """The source position the transform kept, if it kept one: (topic,) partition, offset."""
    if not {"partition", "offset"} <= set(columns):
        return ()
    return ("topic", "partition", "offset") if "topic" in columns else ("partition", "offset")


def listed(columns: list[str], alias: str | None = None) -> sql.Composed:
    """`a, b, c`, or with an alias `r.a, r.b, r.c`."""
    if alias is None:
        return sql.SQL(", ").join(map(sql.Identifier, columns))
    return sql.SQL(", ").join(sql.SQL("{}.{}").format(sql.SQL(alias), sql.Identifier(c)) for c in columns)
