"""The commit's executor: it checks a staged batch is all there, runs the statements that move its rows into the
sink, the outbox and the dead letters (statements.py, dead_letters.py), and turns the sink's refusals into
SinkError."""

from __future__ import annotations

from typing import NamedTuple

import psycopg2
import psycopg2.errors
from psycopg2 import sql

from eosbatch.ledger.cleanup import table_exists
from eosbatch.ledger.errors import first_line
from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import catalog, dead_letters, deletes, evolve, rendering, statements
from eosbatch.ledger.sinks.catalog import KeyColumns
from eosbatch.ledger.sinks.modes import mode_of
from eosbatch.ledger.sinks.names import (
    AMBIGUOUS_KEY,
    BATCH_COLUMN,
    DELETED_COLUMN,
    RECORD_TOO_BIG,
    WRITER_COLUMN,
    Column,
    listed,
    position_columns,
    sink_table,
    stage_table,
)
from eosbatch.ledger.sinks.tables import ensure_outbox
from eosbatch.ledger.store import Batch, Cursor
from eosbatch.pipeline import Pipeline


class Moved(NamedTuple):
    sink_rows: int    # rows the upsert inserted or changed
    outbox: int       # output records written to the logged outbox (what publish must produce)
    too_big: int = 0  # rows whose output record would exceed the topic's limit: dead letters instead
    outbox_columns: list[str] | None = None  # the output record's columns, as the typed outbox holds them


def missing_staged(cur: Cursor, pipeline: Pipeline, batch: Batch) -> list[str]:
    """What is not in staging that the batch recorded at `staged`, writer by writer; empty when all is there.

    Staging is UNLOGGED: a PostgreSQL crash (immediate stop, power cut, OOM kill, failover) empties it
    while the ledger, logged, still says `staged`. Committing then would move nothing and advance the
    offsets past the batch's records: they would be lost. So the commit proves, before it moves anything,
    that each successful writer's rows are all there."""
    problems: list[str] = []
    tables = {"sink": (stage_table(pipeline), BATCH_COLUMN, WRITER_COLUMN),
              "dead_letters": (sql.Identifier("eosbatch", "staged_dead_letters"), "batch_id", "writer")}
    for kind, (table, batch_column, writer_column) in tables.items():
        expected = batch.writer_counts(kind)
        if expected is None:
            problems.append(f"{kind}: staged by an older eosbatch that recorded no row counts")
            continue
        if not expected:
            continue
        found: dict[str, int] = {}
        if table_exists(cur, table):
            cur.execute(sql.SQL("SELECT {w}, count(*) FROM {t} WHERE {b} = %s AND {w} = ANY(%s) GROUP BY {w}").format(
                w=sql.Identifier(writer_column), t=table, b=sql.Identifier(batch_column)),
                (batch.id, sorted(expected)))
            found = {writer: int(n) for writer, n in cur.fetchall()}
        problems += [f"{kind}: writer {writer} staged {n} rows, {found.get(writer, 0)} are there"
                     for writer, n in sorted(expected.items()) if found.get(writer, 0) != n]
    return problems


def insert_pays(cur: Cursor, pipeline: Pipeline, keys: KeyColumns) -> bool:
    """Whether to write the batch by a plain INSERT instead of the upsert: a sink whose mode allows it (replace)
    that holds no row yet (a first load, a backfill into a new table), and keys compared alike in staging and
    the sink (same types and collations: one row per key in the batch is one row per key in the sink's unique
    index).

    INSERT ... ON CONFLICT pays a speculative insertion per new row (a lock taken and released, one more WAL
    record): 454,000 new keys into an empty sink took 2.9-3.0 s, a plain INSERT 2.2-2.3 s. Into a sink that
    holds rows, the stored keys would have to be looked up first: an UPDATE of them then an INSERT of the
    others looked every key up twice (485,000 keys into 454,000 rows: 4.6-5.3 s, the upsert 4.2-4.3 s), and
    that lookup is a join the planner may run as a scan of the sink per row when neither table has
    statistics yet (a sink just created, staging just loaded): it once ran for 25 minutes."""
    if not mode_of(pipeline).may_insert_plainly or not keys.alike(pipeline.sink.key):
        return False
    cur.execute(sql.SQL("SELECT NOT EXISTS (SELECT FROM {})").format(sink_table(pipeline)))
    return bool(cur.fetchone()[0])


REFUSED_CLASSES = ("21", "22", "23")  # cardinality, data, integrity: the rows as they are can never go in


def _refused(pipeline: Pipeline, exc: psycopg2.Error) -> SinkError | None:
    """The sink's refusal of the batch's rows (a NULL key, a number out of range, a user's CHECK or foreign
    key) as the terminal error it is: the same rows are refused every time, so a retry only loops."""
    code = exc.pgcode or ""
    if not code.startswith(REFUSED_CLASSES) or code == "23P01":  # 23P01: the ledger's range exclusion
        return None
    detail = f" ({exc.diag.message_detail})" if exc.diag.message_detail else ""
    return SinkError(f"sink {pipeline.sink.table}: PostgreSQL refused the batch's rows: "
                     f"{exc.diag.message_primary or first_line(exc)}{detail} [SQLSTATE {code}]; the batch is "
                     "aborted: change the transform or the table, then run again")


def move_to_sink(cur: Cursor, pipeline: Pipeline, batch: Batch, with_outbox: bool,
                 max_record_bytes: int | None = None) -> Moved:
    """`_move_to_sink`; rows the sink refuses raise SinkError (the caller's transaction must roll back)."""
    try:
        return _move_to_sink(cur, pipeline, batch, with_outbox, max_record_bytes)
    except psycopg2.Error as exc:
        refused = _refused(pipeline, exc)
        if refused is None:
            raise
        raise refused from exc


def _move_to_sink(cur: Cursor, pipeline: Pipeline, batch: Batch, with_outbox: bool,
                  max_record_bytes: int | None) -> Moved:
    """Upsert the successful writers' staged rows into the sink and, in the same statement, write the output
    records into the logged outbox from what the upsert really did: a row the sink refused (an older
    version) is not published, and after COMMIT publish needs nothing from unlogged staging.

    A row whose output record would be larger than `max_record_bytes` could never be published, so it would
    block the lane for ever after COMMIT: it goes to the dead letters instead of the sink and the output.
    A key nothing orders raises SinkError: the caller's transaction must roll back.

    The rows pass once, through the upsert: a row failing either check raises inside the statement
    (eosbatch.refuse_row, migration 0009), and only then, from a savepoint, the statement that also counts
    and moves such rows runs (its extra scans made PostgreSQL materialise every row: ~1.1 s per 1M)."""
    shape = catalog.read(cur, pipeline)
    columns = shape.batch_columns(batch)
    evolve.check_shape(pipeline, shape, columns)
    if not columns or not batch.writer_tags("sink"):
        return Moved(0, 0)
    params: dict[str, object] = {"batch": batch.id, "writers": batch.writer_tags("sink")}
    bytewise = shape.keys.bytewise
    mode = mode_of(pipeline)
    deleting = stages_tombstones(pipeline, batch)
    chosen = deletes.staged(columns) if deleting else columns  # what the batch's latest rows are chosen from
    rows, out = statements.batch_rows(pipeline, chosen, flagged=True, bytewise=bytewise)
    out = [c for c in out if c != DELETED_COLUMN]
    output = pipeline.output if with_outbox else None
    limit = max_record_bytes if output is not None else None
    # The result rows' types: an accumulate sink publishes them (its deltas), and the size bound reads them.
    result_columns = catalog.result_columns(
        cur, statements.batch_rows(pipeline, columns, bytewise=bytewise)[0], params
    ) if limit is not None or (output is not None and mode.publishes_result_rows) else []
    outbox = sql.SQL("SELECT 0")
    outbox_columns = None
    if output is not None:
        # Typed, not JSON: rendering every record and logging its text cost ~2 s of a 1M-record commit, the
        # run's critical path; publish renders it instead (see migration 0008).
        published_types = result_columns if mode.publishes_result_rows else catalog.result_columns(
            cur, sql.SQL("SELECT {} FROM {}").format(listed(out), sink_table(pipeline)), params)
        flag = [Column(DELETED_COLUMN, "boolean")] if deleting else []
        ensure_outbox(cur, pipeline, [*published_types, *flag], shape)
        outbox_columns = [*out, *(c.name for c in flag)]
        outbox = deletes.outbox_insert(pipeline, out) if deleting else statements.outbox_insert(pipeline, out)
    upsert = statements.upsert(pipeline, columns, out, batch.kind)
    fits = size = sql.SQL("true")
    if output is not None and limit is not None:
        params.update(max_bytes=limit, pipeline=pipeline.name)
        size, fits = rendering.record_size(output), rendering.record_fits(result_columns, output)
    checked = statements.checked_rows(pipeline, chosen, bytewise)

    def move(write: sql.Composable) -> tuple[int, int]:
        statement = deletes.move(pipeline, columns, out, batch.kind, checked, fits, write, outbox,
                                 statements.key_text(pipeline)) if deleting else statements.move(
            pipeline, checked, fits, write, outbox)
        cur.execute(statement, {**params, "ambiguous": AMBIGUOUS_KEY, "too_big": RECORD_TOO_BIG})
        changed, outboxed = cur.fetchone()
        return int(changed), int(outboxed)

    insert = insert_pays(cur, pipeline, shape.keys)
    cur.execute("SAVEPOINT eosbatch_move")
    try:
        if insert:
            try:
                sink_rows, outboxed = move(statements.insert(pipeline, out))
            except psycopg2.errors.UniqueViolation:
                # Another transaction (a writer outside eosbatch) stored one of the keys meanwhile: the upsert
                # settles that as it always did.
                cur.execute("ROLLBACK TO SAVEPOINT eosbatch_move")
                insert = False
        if not insert:
            sink_rows, outboxed = move(upsert)
        cur.execute("RELEASE SAVEPOINT eosbatch_move")
        return Moved(sink_rows, outboxed if output is not None else 0, 0, outbox_columns)
    except psycopg2.Error as exc:
        if exc.pgcode not in (AMBIGUOUS_KEY, RECORD_TOO_BIG):
            raise
        cur.execute("ROLLBACK TO SAVEPOINT eosbatch_move")
        if exc.pgcode == AMBIGUOUS_KEY:
            raise _ambiguous_key(cur, pipeline, columns, params) from None  # the caller rolls back
    assert output is not None  # only a limit refuses a record as too big

    # Some output record is over the limit: the statement that also moves such rows to the dead letters.
    if deleting:
        cur.execute(deletes.move_with_too_big(pipeline, columns, out, batch.kind, rows, fits, dead_letters.too_big(
            pipeline, output, out, size, fits), upsert, outbox), params)
    else:
        cur.execute(dead_letters.move_with_too_big(pipeline, output, rows, out, size, fits, upsert, outbox), params)
    sink_rows, outboxed, oversized, ambiguous = cur.fetchone()
    if ambiguous:
        raise _ambiguous_key(cur, pipeline, columns, params)  # the caller's rollback undoes the statement
    return Moved(int(sink_rows), int(outboxed), int(oversized), outbox_columns)


def stages_tombstones(pipeline: Pipeline, batch: Batch) -> bool:
    """Whether this batch was staged with the tombstone flag (its sink takes deletes; the process step
    records it): only then does its commit delete, and weigh its rows against the deleted markers."""
    return pipeline.sink.deletes is not None and bool((batch.writers or {}).get("deletes"))


def _ambiguous_key(cur: Cursor, pipeline: Pipeline, columns: list[str], params: dict[str, object]) -> SinkError:
    """The error naming one ambiguous key, once the commit's statement has flagged some (the rare path)."""
    position = position_columns(columns)
    cur.execute(statements.repeated_key(pipeline, columns), params)
    if position:  # the key staged from two sources, then how many there are
        found = cur.fetchone()
        cur.execute(statements.key_sources(pipeline, columns),
                    {**params, **{f"key_{i}": v for i, v in enumerate(found)}})
    row = cur.fetchone()
    key = dict(zip(pipeline.sink.key, row[:-1], strict=True))
    where = "partitions" if position else "times"
    return SinkError(f"sink.order_by: key {key} appears in {row[-1]} {where} of one batch and nothing orders "
                     "them; set sink.order_by (an event time or version column)"
                     + ("" if position else " or keep `partition`/`offset` in the transform's output"))


def copy_dead_letters(cur: Cursor, pipeline: str, batch_id: int, writers: list[str]) -> int:
    """Move the batch's staged dead letters; a record two writers staged (a re-run Spark stage) once."""
    cur.execute(dead_letters.COPY_STAGED, (pipeline, batch_id, writers))
    return cur.rowcount
