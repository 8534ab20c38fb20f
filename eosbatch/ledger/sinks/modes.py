"""What a sink mode changes in the commit: the batch's result rows, the upsert's conflict action, what the
outbox publishes, and which shortcuts (a plain INSERT, early publish) may apply. One class per mode, chosen
once from `pipeline.sink.mode` (mode_of): a new mode is a new class here."""

from __future__ import annotations

from psycopg2 import sql

from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import latest
from eosbatch.ledger.sinks.names import listed, staged_rows
from eosbatch.pipeline import Pipeline, PostgresSink
from eosbatch.protocol.states import BatchKind


class SinkMode:
    """The base: what every mode must say."""
    name = ""
    # The outbox gets the batch's result rows (every one of them applied), typed as they come; otherwise the
    # sink's rows as the upsert stored them, typed as the sink.
    publishes_result_rows = False
    # An empty sink may take the batch by a plain INSERT instead of the upsert (commit.insert_pays).
    may_insert_plainly = False
    # The sink stores each batch row as it comes (converted to its column types), so its output records can
    # be rendered from staging before the commit (outbox.early_outbox_query).
    may_publish_early = False

    def check_columns(self, sink: PostgresSink, names: list[str]) -> None:
        """SinkError if the transform's output columns do not fit this mode."""

    def ambiguity_flag(self, pipeline: Pipeline, columns: list[str]) -> sql.Composable | None:
        """The flag of a result row whose key nothing orders (latest.ambiguity_flag); None: none can be."""
        return None

    def result_rows(self, pipeline: Pipeline, columns: list[str], extra: sql.Composable,
                    flag: sql.Composable | None, bytewise: frozenset[str]) -> tuple[sql.Composed, list[str]]:
        """SELECT of the batch's result rows, one per key, with `extra` after the columns; and its columns."""
        raise NotImplementedError

    def conflict_action(self, pipeline: Pipeline, columns: list[str], others: list[str],
                        kind: BatchKind) -> sql.Composable:
        """The upsert's ON CONFLICT action for a key already stored (`s`) with `others` its non-key columns."""
        raise NotImplementedError


class Replace(SinkMode):
    """A later row for a key replaces the stored one; the batch brings its latest row of each key."""
    name = "replace"
    may_insert_plainly = True
    may_publish_early = True

    def ambiguity_flag(self, pipeline: Pipeline, columns: list[str]) -> sql.Composable | None:
        return latest.ambiguity_flag(pipeline, columns)

    def result_rows(self, pipeline: Pipeline, columns: list[str], extra: sql.Composable,
                    flag: sql.Composable | None, bytewise: frozenset[str]) -> tuple[sql.Composed, list[str]]:
        sort_keys = sql.SQL(", ").join(sql.SQL('{} COLLATE "C"' if k in bytewise else "{}").format(
            sql.Identifier(k)) for k in pipeline.sink.key)
        order = sql.SQL(", ").join([sort_keys, *latest.in_batch_order(pipeline, columns)])
        # The window sorts exactly as DISTINCT ON does (its whole partition as the frame), so one Sort serves both.
        window = sql.SQL("") if flag is None else sql.SQL(
            " WINDOW w AS (PARTITION BY {} ORDER BY {} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)"
        ).format(sort_keys, order)
        return sql.SQL("SELECT DISTINCT ON ({}) {}{} {}{} ORDER BY {}").format(
            sort_keys, listed(columns), extra, staged_rows(pipeline), window, order), columns

    def conflict_action(self, pipeline: Pipeline, columns: list[str], others: list[str],
                        kind: BatchKind) -> sql.Composable:
        if not others:
            return sql.SQL("DO NOTHING")
        return sql.SQL("DO UPDATE SET {} WHERE {}").format(sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in others),
            latest.new_row_wins(pipeline, columns, kind))


class Accumulate(SinkMode):
    """The accumulate columns add to the stored values (running totals); the outbox publishes the deltas."""
    name = "accumulate"
    publishes_result_rows = True

    def check_columns(self, sink: PostgresSink, names: list[str]) -> None:
        if extra := sorted(set(names) - set(sink.key) - set(sink.accumulate)):
            raise SinkError(f"sink.accumulate: an accumulate sink takes only key and accumulated columns; "
                            f"the transform also returns {extra}")

    def result_rows(self, pipeline: Pipeline, columns: list[str], extra: sql.Composable,
                    flag: sql.Composable | None, bytewise: frozenset[str]) -> tuple[sql.Composed, list[str]]:
        key_list = listed(list(pipeline.sink.key))
        sums = sql.SQL(", ").join(sql.SQL("sum({c}) AS {c}").format(c=sql.Identifier(c))
                                  for c in pipeline.sink.accumulate)
        return sql.SQL("SELECT {}, {}{} {} GROUP BY {}").format(
            key_list, sums, extra, staged_rows(pipeline), key_list), [*pipeline.sink.key, *pipeline.sink.accumulate]

    def conflict_action(self, pipeline: Pipeline, columns: list[str], others: list[str],
                        kind: BatchKind) -> sql.Composable:
        return sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
            sql.SQL("{c} = COALESCE(s.{c}, 0) + COALESCE(EXCLUDED.{c}, 0)").format(c=sql.Identifier(c))
            for c in others))


class Append(SinkMode):
    """Every row is inserted once: the sink's key is the row's source position and its number within its
    record (pipeline.APPEND_KEY; spark/shaping.py numbers the rows before staging, the same way on every
    read), so a replay's or a retried commit's rows conflict with the stored ones and change nothing. The
    outbox publishes the rows inserted (RETURNING): one record per new row, none for a replayed one."""
    name = "append"
    may_insert_plainly = True   # the batch's keys are unique by construction
    may_publish_early = True    # a row is stored as it comes, or not at all (then the counts differ)

    def result_rows(self, pipeline: Pipeline, columns: list[str], extra: sql.Composable,
                    flag: sql.Composable | None, bytewise: frozenset[str]) -> tuple[sql.Composed, list[str]]:
        return sql.SQL("SELECT {}{} {}").format(listed(columns), extra, staged_rows(pipeline)), columns

    def conflict_action(self, pipeline: Pipeline, columns: list[str], others: list[str],
                        kind: BatchKind) -> sql.Composable:
        return sql.SQL("DO NOTHING")


MODES: dict[str, SinkMode] = {mode.name: mode for mode in (Replace(), Accumulate(), Append())}


def mode_of(pipeline: Pipeline) -> SinkMode:
    """The pipeline's sink mode (pipeline.PostgresSink checked the name)."""
    return MODES[pipeline.sink.mode]
