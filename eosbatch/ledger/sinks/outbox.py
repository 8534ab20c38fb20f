"""The queries publish reads a batch's output records with: each row (seq, key, source topic, partition, offset,
then the copied headers' columns and the value: JSON text, or the Avro fields; rendering.py) from the typed
outbox, from the JSON outbox of an older ledger, or from staging before the commit (early publish); and a batch
committed before the outbox, from staging."""

from __future__ import annotations

import re

from psycopg2 import sql

from eosbatch.ledger.sinks import catalog, deletes, latest, rendering, statements
from eosbatch.ledger.sinks.catalog import SinkShape
from eosbatch.ledger.sinks.modes import mode_of
from eosbatch.ledger.sinks.names import (
    BATCH_COLUMN,
    DELETED_COLUMN,
    SEQ_COLUMN,
    deleted_table,
    listed,
    outbox_table,
    position_columns,
)
from eosbatch.ledger.store import Batch, Cursor
from eosbatch.pipeline import Pipeline


def outbox_query(pipeline: Pipeline, columns: list[str]) -> sql.Composed:
    """Read a batch's typed outbox as publish needs it: seq, key, its source, its copied headers and value
    (rendering.published). row_to_json over the batch's columns, in the commit's order, renders exactly what
    the commit's own row_to_json did when the outbox held JSON (migration 0008). A record flagged
    DELETED_COLUMN (a sink with deletes) is a tombstone: its value is NULL. One parameter: the batch's id."""
    assert pipeline.output is not None
    plain = [c for c in columns if c != DELETED_COLUMN]
    return sql.SQL("SELECT q.{seq}::text, {okey}, {src}, {published} FROM {t} q "
                   "CROSS JOIN LATERAL (SELECT {cols}) r WHERE q.{batch} = %s").format(
        seq=sql.Identifier(SEQ_COLUMN), okey=rendering.key(pipeline.output, "r"), src=_source("q", plain),
        published=_published(pipeline, "q", DELETED_COLUMN in columns), t=outbox_table(pipeline),
        cols=listed(plain, "q"), batch=sql.Identifier(BATCH_COLUMN))


def _published(pipeline: Pipeline, alias: str, flagged: bool) -> sql.Composable:
    """rendering.published of row `r`; where `alias`'s DELETED_COLUMN says so (a sink with deletes, whose output
    is a JSON value without copied headers: pipeline.Pipeline), a tombstone: a NULL value."""
    assert pipeline.output is not None
    if not flagged:
        return rendering.published(pipeline.output, "r")
    return sql.SQL("CASE WHEN {}.{} THEN NULL ELSE row_to_json(r.*)::text END").format(
        sql.Identifier(alias), sql.Identifier(DELETED_COLUMN))


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


def early_outbox_query(cur: Cursor, pipeline: Pipeline, batch: Batch) -> tuple[sql.Composed | None, str | None]:
    """early_query for this staged batch, from the catalog as it is now, or None and why not (one phrase for
    the run's log; no phrase without an output: there is nothing to publish)."""
    if pipeline.output is None:
        return None, None
    shape = catalog.read(cur, pipeline)
    deleting = pipeline.sink.deletes is not None and bool((batch.writers or {}).get("deletes"))
    columns = shape.batch_columns(batch)
    if why := refusal(shape, batch) or not_exact(pipeline, shape, columns, deleting):
        return None, why
    return early_query(pipeline, shape, columns, deleting), None


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


def early_query(pipeline: Pipeline, shape: SinkShape, columns: list[str], deleting: bool = False
                ) -> sql.Composed | None:
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
    otherwise). Only seq differs: it numbers the records in this query's order, a permutation.

    `deleting` (a batch staged with the tombstone flag): a row older than its key's deleted marker is left out,
    as the commit leaves it; a tombstone is rendered as the outbox renders a deleted row (the key, a NULL
    value, the tombstone's source position), though steps.early publishes no batch with tombstones early:
    whether one deletes a row depends on the sink, which its commit changes while this query reads."""
    if pipeline.output is None or not_exact(pipeline, shape, columns, deleting) is not None:
        return None
    sink_types = shape.sink_types  # with typmods: the casts convert as storing does
    rows, out = _early_rows(pipeline, shape, columns, deleting)
    casts = sql.SQL(", ").join(sql.SQL("CAST(c.{n} AS {t}) AS {n}").format(n=sql.Identifier(c),
                                                                           t=sql.SQL(sink_types[c])) for c in out)
    return sql.SQL("SELECT (row_number() OVER ())::text, {okey}, {src}, {published} "
                   "FROM ({rows}) c CROSS JOIN LATERAL (SELECT {casts}) r{where}").format(
        okey=rendering.key(pipeline.output, "r"), src=_source("r", out),
        published=_published(pipeline, "c", deleting), rows=rows, casts=casts,
        where=_early_deletes(pipeline, columns) if deleting else sql.SQL(""))


def never_early(pipeline: Pipeline) -> str | None:
    """Why none of this pipeline's batches can be published early (one phrase for the run's log), or None."""
    if pipeline.output is None:
        return "the pipeline has no output topic"
    if not (mode := mode_of(pipeline)).may_publish_early:
        return f"its {mode.name} sink publishes what the commit computes from the stored rows"
    return None


def not_exact(pipeline: Pipeline, shape: SinkShape, columns: list[str], deleting: bool = False) -> str | None:
    """Why early_query would not be exact for a batch that staged `columns` (one phrase for the run's log, in
    early_query's terms), or None."""
    if not (mode := mode_of(pipeline)).may_publish_early:
        return f"its {mode.name} sink publishes what the commit computes from the stored rows"
    keys = shape.keys
    if not keys.alike(pipeline.sink.key):
        return "the sink's key columns differ from the batch's in type"
    if inexact := [k.type for k in keys.stored.values() if _bare(k.type) not in EXACT_KEY_TYPES]:
        return f"the sink's key type(s) {inexact} may store an equal value in other bytes"
    if shape.nondeterministic_key:
        return "the sink's key has a nondeterministic collation"
    if not shape.sink_exists:
        return "the sink table does not exist yet"
    if shape.rewrites_rows:
        return "the sink has triggers, rules, partitions or children that may change the row it stores"
    if not columns:
        return "the batch staged no columns"
    if missing := [c for c in _early_rows(pipeline, shape, columns, deleting)[1] if c not in shape.sink_types]:
        return f"the sink has no column(s) {missing}"
    return None


def _bare(sql_type: str) -> str:
    return re.sub(r"\(\d+(,\s*\d+)?\)", "", sql_type)


def _early_rows(pipeline: Pipeline, shape: SinkShape, columns: list[str], deleting: bool
                ) -> tuple[sql.Composed, list[str]]:
    rows, out = statements.batch_rows(pipeline, deletes.staged(columns) if deleting else columns,
                                      bytewise=shape.keys.bytewise)
    return rows, [c for c in out if c != DELETED_COLUMN]


def _early_deletes(pipeline: Pipeline, columns: list[str]) -> sql.Composed:
    """early_query's filter of a batch staged with the tombstone flag (batch rows `c`): the rows its commit
    writes, leaving out those older than their key's deleted marker (only tombstones change markers, and a
    batch with tombstones does not publish early: steps.early)."""
    same = sql.SQL(" AND ").join(sql.SQL("d.{k} = c.{k}").format(k=sql.Identifier(k)) for k in pipeline.sink.key)
    return sql.SQL(" WHERE c.{flag} OR NOT EXISTS (SELECT FROM {marker} d WHERE {same} AND NOT {wins})").format(
        flag=sql.Identifier(DELETED_COLUMN), marker=deleted_table(pipeline), same=same,
        wins=latest.new_row_wins(pipeline, columns, "regular", stored="d", new="c"))


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
