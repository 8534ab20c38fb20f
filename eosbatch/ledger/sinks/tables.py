"""The sink, staging and outbox tables: the transform's columns checked against the sink's definition, and the
tables created or changed to take them."""

from __future__ import annotations

from psycopg2 import sql

from eosbatch.ledger.cleanup import OPEN_BATCH_IDS, open_batch_params
from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import catalog, markers, output_fit
from eosbatch.ledger.sinks.catalog import SinkShape
from eosbatch.ledger.sinks.modes import mode_of
from eosbatch.ledger.sinks.names import (
    BATCH_COLUMN,
    MAX_NAME_BYTES,
    OWN_PREFIX,
    SEQ_COLUMN,
    TRANSIENT_TABLE,
    WRITER_COLUMN,
    Column,
    outbox_table,
    sink_table,
    stage_table,
)
from eosbatch.ledger.store import Cursor
from eosbatch.pipeline import Pipeline


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
    mode_of(pipeline).check_columns(sink, names)
    if sink.deletes is not None:
        markers.check_columns(pipeline, columns)
    output_fit.check_columns(pipeline, columns)


def _definitions(columns: list[Column]) -> sql.Composed:
    return sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.pg_type)) for c in columns)


def ensure_tables(cur: Cursor, pipeline: Pipeline, columns: list[Column]) -> None:
    """Create a missing sink from the transform's schema (primary key on the key); check an existing one;
    (re)create the typed staging table for this pipeline."""
    validate_columns(pipeline, columns)
    shape = catalog.read(cur, pipeline)
    sink, key = sink_table(pipeline), tuple(pipeline.sink.key)
    if not shape.sink_exists:
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(pipeline.sink.schema)))
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
            sink, _definitions(columns), sql.SQL(", ").join(map(sql.Identifier, key))))
    else:
        existing = shape.sink_types
        if missing := [c.name for c in columns if c.name not in existing]:
            raise SinkError(f"sink.table: {pipeline.sink.schema}.{pipeline.sink.table} has no column(s) {missing} "
                            f"that the transform returns (it has {list(existing)}); add them to the table, or set "
                            "PostgresSink(evolve=True) to have eosbatch add new columns")
        if not shape.has_unique_key(key):
            raise SinkError(f"sink.key: {pipeline.sink.schema}.{pipeline.sink.table} has no primary key or "
                            f"unique index on exactly {list(key)}; an idempotent upsert needs one")
    output_fit.check_value(cur, pipeline, shape, columns)
    _ensure_stage(cur, pipeline, columns, shape)


def _ensure_stage(cur: Cursor, pipeline: Pipeline, columns: list[Column], shape: SinkShape) -> None:
    """The typed staging table. A changed transform adds columns instead of dropping the table: another
    lane may have rows staged there, waiting for their commit (each batch records the columns it staged)."""
    stage = stage_table(pipeline)
    existing = shape.stage_types
    if not existing:
        # UNLOGGED: cheap, and safe only because the commit checks every writer's rows are still there
        # (a PostgreSQL crash empties unlogged tables), and nothing publish needs stays here after COMMIT.
        cur.execute(sql.SQL("CREATE UNLOGGED TABLE IF NOT EXISTS {} ({} bigint NOT NULL, {} text NOT NULL, {}) "
                            "WITH ({})").format(stage, sql.Identifier(BATCH_COLUMN), sql.Identifier(WRITER_COLUMN),
                                                _definitions(columns), TRANSIENT_TABLE))
        cur.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} ({}, {})").format(
            sql.Identifier(f"stage_{pipeline.name}_batch"), stage, sql.Identifier(BATCH_COLUMN),
            sql.Identifier(WRITER_COLUMN)))
        return
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
    if pg_type.endswith("[]"):
        return "ARRAY"
    return {"timestamptz": "timestamp with time zone", "timestamp": "timestamp without time zone"}.get(pg_type, pg_type)


def ensure_outbox(cur: Cursor, pipeline: Pipeline, columns: list[Column], shape: SinkShape | None = None
                  ) -> sql.Identifier:
    """The pipeline's typed outbox, with `columns` typed as the records to publish are (the sink's types for
    a replace sink, the sums' for an accumulate one), so publish renders each record as the commit would
    have. Run inside the commit, under the pipeline's lock: a changed transform adds or retypes columns; a
    column another batch still waits to publish from is never retyped. `shape`: the catalog as the commit
    read it (the outbox's columns read now without it)."""
    table = outbox_table(pipeline)
    existing = shape.outbox_types if shape is not None else catalog.table_types(cur, table)
    if not existing:
        # LOGGED: after COMMIT publish reads the batch's records from here, and a crash must not lose them.
        # No index: a batch's rows are written once, read once by a scan and deleted once (migration 0007).
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({} bigint NOT NULL, {} bigint NOT NULL, {}) WITH ({})"
                            ).format(table, sql.Identifier(BATCH_COLUMN), sql.Identifier(SEQ_COLUMN),
                                     _definitions(columns), TRANSIENT_TABLE))
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
