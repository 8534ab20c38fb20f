"""The commit's SQL for a replace sink with deletes (docs/deletes.md), built without I/O; commit.py runs it.

A tombstone is staged like a row, with DELETED_COLUMN true, so the batch's latest row of a key (DISTINCT ON,
latest.in_batch_order) is either a row or a tombstone. The statement then, in one go:

- upserts the batch's rows that are not tombstones and that beat their key's deleted marker, if any
  (`batch_rows`: a row older than the delete cannot bring the key back);
- deletes the stored rows that a tombstone beats (`removed`), RETURNING them for the outbox, where they
  become tombstones on the output topic; a tombstone for an absent key publishes nothing;
- records or advances the key's deleted marker (its order value and source position) for a tombstone that
  no stored row beats (`marked`), and drops the marker of a key that a row brought back (`unmarked`).

"Beats" is one rule for every pair (latest.new_row_wins): a row against the stored row, a tombstone against
the stored row, a row or a tombstone against a marker. Every sub-statement reads the sink as it was before
the statement, and the batch has one latest row per key, so no key is both deleted and written.
"""

from __future__ import annotations

from psycopg2 import sql

from eosbatch.ledger.sinks import latest
from eosbatch.ledger.sinks.names import (
    AMBIGUOUS_COLUMN,
    BATCH_COLUMN,
    DELETED_COLUMN,
    SEQ_COLUMN,
    deleted_table,
    listed,
    outbox_table,
    position_columns,
    sink_table,
)
from eosbatch.pipeline import Pipeline
from eosbatch.protocol.states import BatchKind

FLAG = sql.Identifier(DELETED_COLUMN)


def marker_columns(pipeline: Pipeline, columns: list[str]) -> list[str]:
    """What a deleted marker keeps of its tombstone besides the key: the order value, then the source position
    (what latest.new_row_wins compares)."""
    return [*pipeline.sink.order_by, *[c for c in position_columns(columns) if c not in pipeline.sink.order_by]]


def staged(columns: list[str]) -> list[str]:
    """The columns the batch's result rows are chosen from: the transform's and the tombstone flag."""
    return [*columns, DELETED_COLUMN]


def _same_key(pipeline: Pipeline, left: str, right: str) -> sql.Composed:
    return sql.SQL(" AND ").join(sql.SQL("{l}.{k} = {r}.{k}").format(l=sql.SQL(left), r=sql.SQL(right),
                                                                     k=sql.Identifier(k)) for k in pipeline.sink.key)


def rows_to_write(pipeline: Pipeline, columns: list[str], out: list[str], kind: BatchKind) -> sql.Composed:
    """`batch_rows` of the statement: the rows that fit and are not tombstones, without those older than their
    key's deleted marker."""
    return sql.SQL("SELECT {out} FROM fitting b WHERE NOT b.{flag} AND NOT EXISTS (SELECT FROM {marker} d "
                   "WHERE {same} AND NOT {wins})").format(
        out=listed(out, "b"), flag=FLAG, marker=deleted_table(pipeline), same=_same_key(pipeline, "d", "b"),
        wins=latest.new_row_wins(pipeline, columns, kind, stored="d", new="b"))


def removed(pipeline: Pipeline, columns: list[str], out: list[str], kind: BatchKind) -> sql.Composed:
    """DELETE of the stored rows a tombstone beats, RETURNING the output record's columns: the stored row's,
    with the tombstone's source position (its place in the input, as a record's headers say)."""
    position = position_columns(columns)
    returned = sql.SQL(", ").join(sql.SQL("{}.{}").format(sql.SQL("b" if c in position else "s"),
                                                          sql.Identifier(c)) for c in out)
    return sql.SQL("DELETE FROM {sink} AS s USING fitting b WHERE b.{flag} AND {same} AND {wins} "
                   "RETURNING {returned}").format(
        sink=sink_table(pipeline), flag=FLAG, same=_same_key(pipeline, "s", "b"),
        wins=latest.new_row_wins(pipeline, columns, kind, stored="s", new="b"), returned=returned)


def marked(pipeline: Pipeline, columns: list[str], kind: BatchKind) -> sql.Composed:
    """INSERT or advance the deleted marker of each tombstone's key that no stored row beats (parameter
    `batch`: the batch that deleted it)."""
    keep = [*pipeline.sink.key, *marker_columns(pipeline, columns)]
    updated = [*marker_columns(pipeline, columns), BATCH_COLUMN]
    return sql.SQL("INSERT INTO {marker} AS d ({names}, {batch}) SELECT {values}, %(batch)s FROM fitting b "
                   "WHERE b.{flag} AND NOT EXISTS (SELECT FROM {sink} s WHERE {same} AND NOT {wins}) "
                   "ON CONFLICT ({key}) DO UPDATE SET {set} WHERE {newer} RETURNING 1").format(
        marker=deleted_table(pipeline), names=listed(keep), batch=sql.Identifier(BATCH_COLUMN),
        values=listed(keep, "b"), flag=FLAG, sink=sink_table(pipeline), same=_same_key(pipeline, "s", "b"),
        wins=latest.new_row_wins(pipeline, columns, kind, stored="s", new="b"), key=listed(list(pipeline.sink.key)),
        set=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updated),
        newer=latest.new_row_wins(pipeline, columns, kind, stored="d", new="EXCLUDED"))


def unmarked(pipeline: Pipeline) -> sql.Composed:
    """DELETE of the markers of keys a row brought back (it beat the marker: rows_to_write)."""
    return sql.SQL("DELETE FROM {marker} d USING changed c WHERE {same} RETURNING 1").format(
        marker=deleted_table(pipeline), same=_same_key(pipeline, "d", "c"))


def outbox_insert(pipeline: Pipeline, out: list[str]) -> sql.Composed:
    """The output records into the typed outbox: the rows the sink stored (`changed`), and the rows it deleted
    (`removed`), flagged: publish sends those as tombstones, the key with a null value."""
    return sql.SQL("INSERT INTO {t} ({b}, {s}, {names}, {flag}) SELECT %(batch)s, row_number() OVER (), {cols}, "
                   "c.{flag} FROM (SELECT {plain}, false AS {flag} FROM changed UNION ALL SELECT {plain}, true "
                   "FROM removed) c RETURNING 1").format(
        t=outbox_table(pipeline), b=sql.Identifier(BATCH_COLUMN), s=sql.Identifier(SEQ_COLUMN), names=listed(out),
        flag=FLAG, cols=listed(out, "c"), plain=listed(out))


def move(pipeline: Pipeline, columns: list[str], out: list[str], kind: BatchKind, checked: sql.Composable,
         fits: sql.Composable, write: sql.Composable, outbox: sql.Composable, key: sql.Composable) -> sql.Composed:
    """The commit's statement for a sink with deletes (statements.move's counterpart): `checked` result rows
    (with the tombstone flag), a record that does not `fit` raising RECORD_TOO_BIG (`too_big`); it returns
    the sink rows written or deleted, and the records written to the outbox."""
    return sql.SQL("WITH all_rows AS ({checked}), fitting AS (SELECT r.* FROM all_rows r WHERE CASE WHEN r.{flag} "
                   "OR {fits} THEN true ELSE eosbatch.refuse_row(%(too_big)s, 'an output record over the limit', "
                   "{key}) END), {rest} SELECT (SELECT count(*) FROM changed) + (SELECT count(*) FROM removed), "
                   "(SELECT count(*) FROM outboxed)").format(
        checked=checked, flag=FLAG, fits=fits, key=key, rest=_writes(pipeline, columns, out, kind, write, outbox))


def move_with_too_big(pipeline: Pipeline, columns: list[str], out: list[str], kind: BatchKind,
                      rows: sql.Composable, fits: sql.Composable, too_big: sql.Composable, write: sql.Composable,
                      outbox: sql.Composable) -> sql.Composed:
    """dead_letters.move_with_too_big's counterpart: the flagged result `rows` that fit (tombstones always do)
    go on as in `move`, the others to the dead letters (`too_big`, reading `all_rows`). It returns the sink
    rows written or deleted, the outbox records, the dead letters and the result rows flagged ambiguous."""
    return sql.SQL("WITH all_rows AS ({rows}), fitting AS (SELECT r.* FROM all_rows r WHERE r.{flag} OR {fits}), "
                   "too_big AS ({too_big}), {rest} SELECT (SELECT count(*) FROM changed) + (SELECT count(*) FROM "
                   "removed), (SELECT count(*) FROM outboxed), (SELECT count(*) FROM too_big), "
                   "(SELECT count(*) FROM all_rows WHERE {ambiguous})").format(
        rows=rows, flag=FLAG, fits=fits, too_big=too_big, ambiguous=sql.Identifier(AMBIGUOUS_COLUMN),
        rest=_writes(pipeline, columns, out, kind, write, outbox))


def _writes(pipeline: Pipeline, columns: list[str], out: list[str], kind: BatchKind, write: sql.Composable,
            outbox: sql.Composable) -> sql.Composed:
    # Every data-modifying WITH runs once, read or not; all of them see the tables as they were before.
    return sql.SQL("batch_rows AS ({rows}), changed AS ({write}), removed AS ({removed}), marked AS ({marked}), "
                   "unmarked AS ({unmarked}), outboxed AS ({outbox})").format(
        rows=rows_to_write(pipeline, columns, out, kind), write=write, removed=removed(pipeline, columns, out, kind),
        marked=marked(pipeline, columns, kind), unmarked=unmarked(pipeline), outbox=outbox)
