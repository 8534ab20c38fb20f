"""Evolving sink tables (`PostgresSink(evolve=True)`): a column the transform adds is added to the sink, nullable,
before the batch stages, in a short transaction of its own that waits at most EVOLVE_LOCK_TIMEOUT for the
table's lock (ADD COLUMN takes an ACCESS EXCLUSIVE lock: it must never queue behind a long query with every
reader of the sink queued behind it). Harmless if the batch then aborts: the column stays, empty, and the
next attempt finds it. A column is never dropped, retyped or narrowed; a column whose new type PostgreSQL will
not assign to the stored one is a terminal error naming both types. The commit re-checks the shape
(check_shape): a column dropped since the batch staged aborts it, and the next run stages it again."""

from __future__ import annotations

import psycopg2.errors
from psycopg2 import sql

from eosbatch.config import Settings
from eosbatch.exceptions import TransientError
from eosbatch.ledger.connection import transaction
from eosbatch.ledger.exceptions import SinkError, StagingLost
from eosbatch.ledger.sinks import catalog, fit
from eosbatch.ledger.sinks.catalog import SinkShape
from eosbatch.ledger.sinks.names import Column, sink_table
from eosbatch.pipeline import Pipeline

EVOLVE_LOCK_TIMEOUT = "5s"


class ShapeChanged(StagingLost):
    """The sink lacks a column the batch staged (dropped or renamed since): the batch is aborted without moving
    anything, and the next run stages its ranges again against the table as it is."""


def new_columns(shape: SinkShape, columns: list[Column]) -> list[Column]:
    """The transform's columns the existing sink lacks (none for a sink not created yet)."""
    if not shape.sink_exists:
        return []
    return [c for c in columns if c.name not in shape.sink_types]


def add_columns(pipeline: Pipeline, columns: list[Column]) -> sql.Composed:
    """One ALTER TABLE adding `columns`, nullable, where they are still missing."""
    return sql.SQL("ALTER TABLE {} {}").format(sink_table(pipeline), sql.SQL(", ").join(
        sql.SQL("ADD COLUMN IF NOT EXISTS {} {}").format(sql.Identifier(c.name), sql.SQL(c.pg_type))
        for c in columns))


def incompatible(pipeline: Pipeline, column: Column, stored: str) -> SinkError:
    return SinkError(f"sink.evolve: column {column.name!r} of {pipeline.sink.schema}.{pipeline.sink.table} is "
                     f"{stored}, and the transform now returns {column.pg_type}, which PostgreSQL does not assign "
                     "to it; evolve adds columns but never changes a column's type: cast it in the transform, "
                     "or give the new type a new column name")


def evolve_sink(settings: Settings, pipeline: Pipeline, columns: list[Column]) -> list[str]:
    """Add the transform's new columns to the existing sink; the names added (none: nothing changed)."""
    with transaction(settings) as cur:
        cur.execute("SELECT set_config('lock_timeout', %s, true)", (EVOLVE_LOCK_TIMEOUT,))
        shape = catalog.read(cur, pipeline)
        if not shape.sink_exists:
            return []
        for column in columns:
            stored = shape.sink_types.get(column.name)
            # the same type assigns (asked of PostgreSQL only for another: one round trip per such column)
            if stored not in (None, column.pg_type) and not fit.assigns(cur, pipeline, column):
                raise incompatible(pipeline, column, stored)
        added = new_columns(shape, columns)
        if added:
            try:
                cur.execute(add_columns(pipeline, added))
            except psycopg2.errors.LockNotAvailable:
                raise TransientError(f"sink.evolve: {pipeline.sink.schema}.{pipeline.sink.table} stayed locked for "
                                     f"{EVOLVE_LOCK_TIMEOUT} (a long query or transaction on it?); adding its new "
                                     "columns is tried again with the batch") from None
        return [c.name for c in added]


def check_shape(pipeline: Pipeline, shape: SinkShape, columns: list[str]) -> None:
    """The commit's re-check: ShapeChanged if the sink lacks a column the batch staged."""
    if shape.sink_exists and (missing := [c for c in columns if c not in shape.sink_types]):
        raise ShapeChanged(f"sink.table: {pipeline.sink.schema}.{pipeline.sink.table} no longer has column(s) "
                           f"{missing} that the batch staged (dropped since?); the batch is aborted and its ranges "
                           "planned again")
