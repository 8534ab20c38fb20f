"""Choosing the latest row of a key, for a replace sink: inside a batch (DISTINCT ON's order, and the flag of a
key nothing orders) and against the stored row (the upsert's DO UPDATE condition). docs/design.md, "Choosing the
latest row"."""

from __future__ import annotations

from psycopg2 import sql

from eosbatch.ledger.sinks.names import position_columns
from eosbatch.pipeline import Pipeline
from eosbatch.protocol.states import BatchKind, lane


def ambiguity_flag(pipeline: Pipeline, columns: list[str]) -> sql.Composable | None:
    """Inside one batch only the order of one partition means something: the flag marks a key repeated with
    nothing to order it (no order_by; no position, or positions in different partitions). It is a window over
    the key, computed on the same sort that DISTINCT ON makes, so finding none costs no pass of its own
    (a separate GROUP BY over staging took ~1.1 s of a 1M-record commit). None: nothing can be ambiguous."""
    if pipeline.sink.order_by:
        return None
    position = position_columns(columns)
    if not position:
        return sql.SQL("count(*) OVER w > 1")
    return sql.SQL(" OR ").join(sql.SQL("min({c}) OVER w <> max({c}) OVER w").format(c=sql.Identifier(c))
                                for c in position[:-1])


def in_batch_order(pipeline: Pipeline, columns: list[str]) -> list[sql.Composable]:
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


def _position_wins(columns: list[str], kind: BatchKind, stored: str = "s", new: str = "EXCLUDED") -> sql.Composable:
    """Without an order_by: the higher offset of the same partition wins; across partitions a regular batch
    (a later commit) wins, while a backfill or replay only beats a lower offset of the same partition (it
    carries older data); a reprocess re-asserts its own positions."""
    position = position_columns(columns)
    if not position:
        return sql.SQL("true" if lane(kind) == "regular" or kind == "reprocess" else "false")
    s, n = sql.SQL(stored), sql.SQL(new)
    same_source = sql.SQL(" AND ").join(sql.SQL("{s}.{c} IS NOT DISTINCT FROM {n}.{c}").format(
        c=sql.Identifier(c), s=s, n=n) for c in position[:-1])
    later = sql.SQL("{n}.{o} {op} {s}.{o}").format(o=sql.Identifier("offset"), s=s, n=n,
                                                   op=sql.SQL(">=" if kind == "reprocess" else ">"))
    if lane(kind) == "regular":
        return sql.SQL("(NOT ({}) OR {})").format(same_source, later)
    return sql.SQL("({} AND {})").format(same_source, later)


def new_row_wins(pipeline: Pipeline, columns: list[str], kind: BatchKind, stored: str = "s",
                 new: str = "EXCLUDED") -> sql.Composable:
    """The DO UPDATE condition (the stored row is `s`, the batch's EXCLUDED): with order_by the highest value
    wins and NULL never beats a value (so a stored NULL never freezes a key); equal values fall to the
    position rule. A sink with deletes asks the same of other pairs (`stored`, `new`: a deleted marker and a
    row, a stored row and a tombstone: ledger.sinks.deletes)."""
    condition = _position_wins(columns, kind, stored, new)
    s, n = sql.SQL(stored), sql.SQL(new)
    for column in reversed(pipeline.sink.order_by):
        c = sql.Identifier(column)
        condition = sql.SQL("(({s}.{c} IS NULL AND {n}.{c} IS NOT NULL) OR {n}.{c} > {s}.{c} "
                            "OR ({s}.{c} IS NOT DISTINCT FROM {n}.{c} AND {rest}))").format(
                                c=c, rest=condition, s=s, n=n)
    return condition
