"""The tables of a sink with deletes (docs/deletes.md): the staging table's tombstone flag, and the deleted
markers, eosbatch.deleted_<pipeline>: one row per deleted key, with the order value and source position of
the tombstone that deleted it, so that an older row (from another partition, a backfill, a replay) cannot
bring the key back. LOGGED, like the ledger: a marker is part of what the sink holds."""

from __future__ import annotations

from psycopg2 import sql

from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import catalog
from eosbatch.ledger.sinks.deletes import marker_columns
from eosbatch.ledger.sinks.names import BATCH_COLUMN, DELETED_COLUMN, Column, deleted_table, stage_table
from eosbatch.ledger.store import Cursor
from eosbatch.pipeline import Pipeline


def check_columns(pipeline: Pipeline, columns: list[Column]) -> None:
    """SinkError (terminal) when the transform's output cannot order a tombstone against rows."""
    names = [c.name for c in columns]
    if not pipeline.sink.order_by and not {"partition", "offset"} <= set(names):
        raise SinkError("sink.deletes: without sink.order_by a tombstone is ordered by its source position; keep "
                        f"`partition` and `offset` (and `topic` with several topics) in the transform's output, "
                        f"which has {names}")


def ensure(cur: Cursor, pipeline: Pipeline, columns: list[Column]) -> None:
    """The staging table's tombstone flag and the deleted markers' table, typed as the transform's columns.
    Run after the staging table's DDL (sinks.ensure_tables, which checked the columns), before staging."""
    # Asked first: an ALTER TABLE takes its lock even when there is nothing to add.
    if DELETED_COLUMN not in catalog.existing_columns(cur, stage_table(pipeline)):
        cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} boolean").format(
            stage_table(pipeline), sql.Identifier(DELETED_COLUMN)))
    types = {c.name: c.pg_type for c in columns}
    kept = [*pipeline.sink.key, *marker_columns(pipeline, [c.name for c in columns])]
    table = deleted_table(pipeline)
    existing = catalog.table_types(cur, table)
    if not existing:
        definitions = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(types[c])) for c in kept)
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, {} bigint NOT NULL, PRIMARY KEY ({}))").format(
            table, definitions, sql.Identifier(BATCH_COLUMN),
            sql.SQL(", ").join(map(sql.Identifier, pipeline.sink.key))))
        return
    for c in [c for c in kept if c not in existing]:  # a transform that started keeping its position
        cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
            table, sql.Identifier(c), sql.SQL(types[c])))
