"""The ledger's side of redriving dead letters: which dead letters a request chooses (the SQL built by a pure
function), a redrive batch's input (`eosbatch.redrive_records`, fixed when it is planned), the commit's marks,
and the read of the chosen records' stored bytes (run by Spark executors). Migration 0011."""

from __future__ import annotations

from typing import Any

from psycopg2 import sql

from eosbatch.ledger.connection import Cursor
from eosbatch.protocol.redrive import OVERSIZE_PREFIX, DeadLetter, Selection

# The stored record, in the order and under the names of the Kafka reader's columns (spark/reader.py).
RECORD_COLUMNS = (("key", sql.SQL("d.key")), ("value", sql.SQL("d.value")), ("topic", sql.SQL("d.topic")),
                  ("partition", sql.SQL("d.partition")), ("offset", sql.SQL('d."offset"')),
                  ("timestamp", sql.SQL('d."timestamp"')), ("timestampType", sql.SQL("d.timestamp_type")))


def choose(selection: Selection) -> sql.Composed:
    """The dead letters a selection chooses that a redrive can run, oldest first: not redriven yet, holding an
    input record (not an output row too big to publish, nor an aggregate's), in the incarnation their partition
    is read in now (a reset's earlier incarnation holds another topic's records). Parameters: pipeline, after
    (the last id a redrive took already), limit, and the selection's own (`choose_params`)."""
    where = [sql.SQL("d.pipeline = %(pipeline)s"), sql.SQL("d.redriven_by IS NULL"), sql.SQL("d.id > %(after)s"),
             sql.SQL('d.partition >= 0 AND d."offset" >= 0'), sql.SQL("NOT starts_with(d.error, %(oversize)s)")]
    if selection.error_like is not None:
        where.append(sql.SQL("d.error LIKE %(error_like)s"))
    if selection.ids:
        where.append(sql.SQL("d.id = ANY(%(ids)s)"))
    if selection.topic:
        where.append(sql.SQL("d.topic = %(topic)s"))
    if selection.partitions:
        where.append(sql.SQL("d.topic || ':' || d.partition = ANY(%(partitions)s)"))
    return sql.SQL('SELECT d.id, d.topic, d.partition, d."offset", d.error FROM eosbatch.dead_letters d '
                   "JOIN eosbatch.partition_offsets o ON o.pipeline = d.pipeline AND o.topic = d.topic "
                   "AND o.partition = d.partition AND o.incarnation = d.incarnation "
                   "WHERE {} ORDER BY d.id LIMIT %(limit)s").format(sql.SQL(" AND ").join(where))


def choose_params(selection: Selection, pipeline: str, after: int, limit: int) -> dict[str, Any]:
    return {"pipeline": pipeline, "after": after, "limit": limit, "oversize": OVERSIZE_PREFIX,
            "error_like": selection.error_like, "ids": list(selection.ids), "topic": selection.topic,
            "partitions": [f"{t}:{p}" for t, p in selection.partitions]}


def chosen(cur: Cursor, selection: Selection, pipeline: str, after: int, limit: int) -> list[DeadLetter]:
    cur.execute(choose(selection), choose_params(selection, pipeline, after, limit))
    return [DeadLetter(*row) for row in cur.fetchall()]


def record_input(cur: Cursor, batch_id: int, letters: list[DeadLetter]) -> None:
    """Fix a planned redrive batch's input: these dead letters, and no others, whoever processes it."""
    cur.execute("INSERT INTO eosbatch.redrive_records (batch_id, dead_letter_id) SELECT %s, unnest(%s::bigint[])",
                (batch_id, [d.id for d in letters]))


def input_size(cur: Cursor, batch_id: int) -> int:
    cur.execute("SELECT count(*) FROM eosbatch.redrive_records WHERE batch_id = %s", (batch_id,))
    return int(cur.fetchone()[0])


def read_input() -> sql.Composed:
    """One slice of a redrive batch's records, as the Kafka reader's columns. Parameters: batch, slices, slice."""
    return sql.SQL("SELECT {} FROM eosbatch.redrive_records r JOIN eosbatch.dead_letters d ON d.id = r.dead_letter_id "
                   "WHERE r.batch_id = %(batch)s AND r.dead_letter_id %% %(slices)s = %(slice)s").format(
        sql.SQL(", ").join(sql.SQL("{} AS {}").format(expr, sql.Identifier(name)) for name, expr in RECORD_COLUMNS))


def fetch_input(dsn: str, batch_id: int, slices: int, index: int) -> list[tuple[Any, ...]]:
    """What a Spark task reads: slice `index` of `slices` of the batch's records (over a connection of its own).
    Importing this module loads no driver: an executor loads psycopg2 here."""
    import psycopg2

    connection = psycopg2.connect(dsn, application_name="eosbatch-executor")
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(read_input(), {"batch": batch_id, "slices": slices, "slice": index})
            return list(cursor.fetchall())
    finally:
        connection.close()


def already_redriven(cur: Cursor, batch_id: int) -> list[int]:
    """The batch's dead letters that another redrive's commit took already (never, while the lane's lease and
    epoch hold): the commit's compare-and-set. Locks the batch's dead letters until the commit ends."""
    cur.execute("SELECT d.id, d.redriven_by FROM eosbatch.dead_letters d JOIN eosbatch.redrive_records r "
                "ON r.dead_letter_id = d.id WHERE r.batch_id = %s ORDER BY d.id FOR UPDATE OF d", (batch_id,))
    return [i for i, by in cur.fetchall() if by is not None]


# After the batch's dead letters are copied: one the batch recorded again (failed to parse again, or its output
# record is too big) has this batch's id now and its new reason; every other one went through the pipeline.
MARK = ("UPDATE eosbatch.dead_letters d SET redriven_by = r.batch_id FROM eosbatch.redrive_records r "
        "WHERE r.batch_id = %(batch)s AND d.id = r.dead_letter_id AND d.batch_id <> %(batch)s "
        "AND d.redriven_by IS NULL")


def mark_redriven(cur: Cursor, batch_id: int) -> int:
    """Mark the batch's dead letters that went through the pipeline (in its commit); how many."""
    cur.execute(MARK, {"batch": batch_id})
    return cur.rowcount
