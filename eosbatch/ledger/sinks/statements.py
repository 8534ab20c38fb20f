"""The commit's SQL, built without I/O: the batch's result rows, the upsert (or plain INSERT) into the sink, the
outbox's INSERT, the checks a result row must pass, and the statement that runs them all (commit.py runs it).

The statement's parameters: `batch`, `writers` (the batch's staged rows), `ambiguous` and `too_big` (the
SQLSTATEs eosbatch.refuse_row raises), and with a record size limit `max_bytes`."""

from __future__ import annotations

from psycopg2 import sql

from eosbatch.ledger.sinks.modes import mode_of
from eosbatch.ledger.sinks.names import (
    AMBIGUOUS_COLUMN,
    BATCH_COLUMN,
    SEQ_COLUMN,
    listed,
    outbox_table,
    position_columns,
    sink_table,
    staged_rows,
)
from eosbatch.pipeline import Pipeline
from eosbatch.protocol.states import BatchKind


def batch_rows(pipeline: Pipeline, columns: list[str], flagged: bool = False,
               bytewise: frozenset[str] = frozenset()) -> tuple[sql.Composed, list[str]]:
    """The batch's result rows, one per key: replace, the latest of each key; accumulate, the sums per key.
    `flagged` adds the boolean column AMBIGUOUS_COLUMN (see latest.ambiguity_flag; false where nothing can be).
    `bytewise`: key columns sorted as bytes, the same order (see catalog.KeyColumns.bytewise)."""
    mode = mode_of(pipeline)
    flag = mode.ambiguity_flag(pipeline, columns) if flagged else None
    extra = sql.SQL("")
    if flagged:
        extra = sql.SQL(", ({}) AS {}").format(sql.SQL("false") if flag is None else flag,
                                               sql.Identifier(AMBIGUOUS_COLUMN))
    return mode.result_rows(pipeline, columns, extra, flag, bytewise)


def upsert(pipeline: Pipeline, columns: list[str], out: list[str], kind: BatchKind) -> sql.Composed:
    """INSERT ... ON CONFLICT of the batch's rows, RETURNING what the sink really took (its rows as stored)."""
    others = [c for c in out if c not in pipeline.sink.key]
    action = mode_of(pipeline).conflict_action(pipeline, columns, others, kind)
    return sql.SQL("INSERT INTO {} AS s ({}) SELECT {} FROM batch_rows ON CONFLICT ({}) {} RETURNING {}").format(
        sink_table(pipeline), listed(out), listed(out), listed(list(pipeline.sink.key)), action, listed(out, "s"))


def insert(pipeline: Pipeline, out: list[str]) -> sql.Composed:
    """A plain INSERT of the batch's rows, for an empty sink (see commit.insert_pays)."""
    return sql.SQL("INSERT INTO {} AS s ({}) SELECT {} FROM batch_rows RETURNING {}").format(
        sink_table(pipeline), listed(out), listed(out), listed(out, "s"))


def outbox_insert(pipeline: Pipeline, out: list[str]) -> sql.Composed:
    """The output records into the typed outbox, numbered: an accumulate sink publishes the batch's deltas
    (every one of them is applied), a replace sink the rows it stored."""
    published = "batch_rows" if mode_of(pipeline).publishes_result_rows else "changed"
    return sql.SQL("INSERT INTO {t} ({b}, {s}, {names}) SELECT %(batch)s, row_number() OVER (), "
                   "{cols} FROM {published} c RETURNING 1").format(
        t=outbox_table(pipeline), b=sql.Identifier(BATCH_COLUMN), s=sql.Identifier(SEQ_COLUMN), names=listed(out),
        published=sql.Identifier(published), cols=listed(out, "c"))


def key_text(pipeline: Pipeline) -> sql.Composed:
    """Result row `r`'s key as text, for the error naming it."""
    return sql.SQL("concat_ws(', ', {})").format(sql.SQL(", ").join(
        sql.SQL("r.{}::text").format(sql.Identifier(k)) for k in pipeline.sink.key))


def checked_rows(pipeline: Pipeline, columns: list[str], bytewise: frozenset[str]) -> sql.Composed:
    """The batch's result rows, a key nothing orders raising AMBIGUOUS_KEY (`ambiguous`) inside the statement."""
    if mode_of(pipeline).ambiguity_flag(pipeline, columns) is None:
        return batch_rows(pipeline, columns, bytewise=bytewise)[0]
    rows, out = batch_rows(pipeline, columns, flagged=True, bytewise=bytewise)
    return sql.SQL(
        "SELECT {cols} FROM ({rows}) r WHERE CASE WHEN r.{flag} THEN eosbatch.refuse_row(%(ambiguous)s, 'a key nothing "
        "orders', {key}) ELSE true END").format(
            cols=listed(out, "r"), rows=rows, flag=sql.Identifier(AMBIGUOUS_COLUMN), key=key_text(pipeline))


def move(pipeline: Pipeline, checked: sql.Composable, fits: sql.Composable, write: sql.Composable,
         outbox: sql.Composable) -> sql.Composed:
    """The commit's statement: `write` (the upsert or INSERT) of the `checked` rows, a record that does not
    `fit` raising RECORD_TOO_BIG (`too_big`), and `outbox`; it returns how many rows each wrote."""
    return sql.SQL("WITH all_rows AS ({checked}), batch_rows AS (SELECT r.* FROM all_rows r WHERE CASE "
                   "WHEN {fits} THEN true ELSE eosbatch.refuse_row(%(too_big)s, 'an output record over "
                   "the limit', {key}) END), changed AS ({write}), outboxed AS ({outbox}) "
                   "SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM outboxed)").format(
        checked=checked, fits=fits, key=key_text(pipeline), write=write, outbox=outbox)


def repeated_key(pipeline: Pipeline, columns: list[str]) -> sql.Composed:
    """A key nothing orders, once the commit's statement has flagged some: with positions, a key staged from
    two sources (min <> max finds one in a hash aggregate; a count(DISTINCT ...) per key sorts every group);
    without, a key staged twice, with its count."""
    key_list = listed(list(pipeline.sink.key))
    position = position_columns(columns)
    if not position:
        return sql.SQL("SELECT {k}, count(*) {f} GROUP BY {k} HAVING count(*) > 1 LIMIT 1").format(
            k=key_list, f=staged_rows(pipeline))
    differs = sql.SQL(" OR ").join(sql.SQL("min({c}) <> max({c})").format(c=sql.Identifier(c))
                                   for c in position[:-1])
    return sql.SQL("SELECT {k} {f} GROUP BY {k} HAVING {d} LIMIT 1").format(
        k=key_list, f=staged_rows(pipeline), d=differs)


def key_sources(pipeline: Pipeline, columns: list[str]) -> sql.Composed:
    """How many sources (topic, partition) staged the key given as parameters key_0, key_1, ..."""
    key_list = listed(list(pipeline.sink.key))
    source = listed(list(position_columns(columns)[:-1]))
    match = sql.SQL(" AND ").join(sql.SQL("{} = %(key_{})s").format(sql.Identifier(k), sql.SQL(str(i)))
                                  for i, k in enumerate(pipeline.sink.key))
    return sql.SQL("SELECT {k}, count(DISTINCT ({s})) {f} AND {m} GROUP BY {k}").format(
        k=key_list, s=source, f=staged_rows(pipeline), m=match)
