"""The queries publish reads a batch's output records with: each row (seq, key, source topic, partition, offset,
then the copied headers' columns and the value: JSON text, or the Avro fields; rendering.py) from the typed
outbox, from the JSON outbox of an older ledger, or from staging before the commit (early publish); and a batch
committed before the outbox, from staging."""

from __future__ import annotations

import re

from psycopg2 import sql

from eosbatch.ledger.sinks import catalog, rendering, statements
from eosbatch.ledger.sinks.catalog import SinkShape
from eosbatch.ledger.sinks.modes import mode_of
from eosbatch.ledger.sinks.names import BATCH_COLUMN, SEQ_COLUMN, listed, outbox_table, position_columns
from eosbatch.ledger.store import Batch, Cursor
from eosbatch.pipeline import Pipeline


def outbox_query(pipeline: Pipeline, columns: list[str]) -> sql.Composed:
    """Read a batch's typed outbox as publish needs it: seq, key, its source, its copied headers and value
    (rendering.published). row_to_json over the batch's columns, in the commit's order, renders exactly what
    the commit's own row_to_json did when the outbox held JSON (migration 0008). One parameter: the batch's id."""
    assert pipeline.output is not None
    return sql.SQL("SELECT q.{seq}::text, {okey}, {src}, {published} FROM {t} q "
                   "CROSS JOIN LATERAL (SELECT {cols}) r WHERE q.{batch} = %s").format(
        seq=sql.Identifier(SEQ_COLUMN), okey=rendering.key(pipeline.output, "r"), src=_source("q", columns),
        published=rendering.published(pipeline.output, "r"), t=outbox_table(pipeline), cols=listed(columns, "q"),
        batch=sql.Identifier(BATCH_COLUMN))


def json_outbox_query() -> sql.SQL:
    """Read a batch committed before the typed outbox (ledger revision 0008): its records are JSON already, in
    eosbatch.outbox, in the layout of `outbox_query` for a JSON value without copied headers. One parameter:
    the batch's id."""
    return sql.SQL("SELECT seq::text, key, source_topic, source_partition::text, source_offset::text, value "
                   "FROM eosbatch.outbox WHERE batch_id = %s")


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
    """early_query for this staged batch, from the catalog as it is now (None where early_refusal says why)."""
    if pipeline.output is None or not mode_of(pipeline).may_publish_early:
        return None
    shape = catalog.read(cur, pipeline)
    if refusal(shape, batch) is not None:
        return None
    return early_query(pipeline, shape, shape.batch_columns(batch))


def early_refusal(cur: Cursor, pipeline: Pipeline, batch: Batch) -> str | None:
    """Why this staged batch may not publish early although its mode could (one phrase for the run's log), or
    None."""
    if pipeline.output is None or not mode_of(pipeline).may_publish_early:
        return None
    return refusal(catalog.read(cur, pipeline), batch)


def refusal(shape: SinkShape, batch: Batch) -> str | None:
    """A batch that changed the sink's shape (sink.evolve added columns) or brings jsonb or array columns is
    published from the outbox only: its records are rendered from the rows as the commit stored them, never
    from staging through casts that might render a value otherwise."""
    added = (batch.writers or {}).get("evolved")
    if added:
        return f"it added column(s) {added} to the sink"
    nested = [c for c in shape.batch_columns(batch)
              if (t := shape.sink_types.get(c, "")) == "jsonb" or t.endswith("[]")]
    if nested:
        return f"its column(s) {nested} are jsonb or arrays"
    return None


def early_query(pipeline: Pipeline, shape: SinkShape, columns: list[str]) -> sql.Composed | None:
    """The records the commit of a batch that staged `columns` will write to its outbox, read from staging
    before it commits, rendered as `outbox_query` renders the outbox (seq, key, source, headers, value); None where
    they might differ, so that only the outbox can say. Parameters: batch, writers.

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
    if pipeline.output is None or not mode_of(pipeline).may_publish_early:
        return None
    keys = shape.keys
    if not keys.alike(pipeline.sink.key) or any(
            re.sub(r"\(\d+(,\s*\d+)?\)", "", k.type) not in EXACT_KEY_TYPES for k in keys.stored.values()):
        return None
    if shape.nondeterministic_key or not shape.sink_exists or shape.rewrites_rows:
        return None
    sink_types = shape.sink_types  # with typmods: the casts convert as storing does
    rows, out = statements.batch_rows(pipeline, columns, bytewise=keys.bytewise)
    if not columns or any(c not in sink_types for c in out):
        return None
    casts = sql.SQL(", ").join(sql.SQL("CAST(c.{n} AS {t}) AS {n}").format(n=sql.Identifier(c),
                                                                           t=sql.SQL(sink_types[c])) for c in out)
    return sql.SQL("SELECT (row_number() OVER ())::text, {okey}, {src}, {published} "
                   "FROM ({rows}) c CROSS JOIN LATERAL (SELECT {casts}) r").format(
        okey=rendering.key(pipeline.output, "r"), src=_source("r", out),
        published=rendering.published(pipeline.output, "r"), rows=rows, casts=casts)


def legacy_outbox(cur: Cursor, pipeline: Pipeline, batch: Batch) -> sql.Composed | None:
    """legacy_query for a batch committed by eosbatch < 0.2, with the columns it staged."""
    return legacy_query(pipeline, catalog.read(cur, pipeline).batch_columns(batch))


def legacy_query(pipeline: Pipeline, columns: list[str]) -> sql.Composed | None:
    """A batch committed by eosbatch < 0.2 has no outbox rows: its output (key, record) is still computed from
    staging (parameters batch, writers)."""
    assert pipeline.output is not None
    if not columns:
        return None
    select, _ = statements.batch_rows(pipeline, columns)
    return sql.SQL("SELECT {}, row_to_json(r.*)::text FROM ({}) r").format(
        rendering.key(pipeline.output, "r"), select)
