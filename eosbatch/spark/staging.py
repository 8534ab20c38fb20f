"""Executors COPY their partition's rows into staging, tagged with the task attempt that wrote them.

Spark re-runs tasks (failures, speculation), and a failed attempt may already have written rows. So each
attempt tags its rows with a writer tag; the action returns, per partition, only the attempt that
succeeded, with its row count; the commit reads only those tags (the Hadoop output-committer idea), and
first checks that each one still holds exactly that many rows: staging is UNLOGGED, and a PostgreSQL crash
empties it. Nothing is collected on the driver but the tags and counts.

The tag is `<run nonce>:<task attempt id>`: Spark's task attempt id is unique within one application,
while `attemptNumber` restarts at 0 in every stage attempt (two attempts of one partition could share it).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Any, NamedTuple

from eosbatch import faults


class WriterResult(NamedTuple):
    writer: str
    rows: int


def _text(value: Any) -> str:
    """A value in PostgreSQL's COPY text format."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, (bytes, bytearray)):
        return "\\\\x" + bytes(value).hex()
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (int, float, Decimal)):
        return str(value)
    text = str(value)
    if any(c in text for c in "\\\t\n\r"):
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def writer_tag(nonce: str, task_attempt_id: int) -> str:
    return f"{nonce}:{task_attempt_id}"


def copy_partition(dsn: str, table_sql: str, nonce: str, batch_id: int,
                   to_row: Callable[[Any], tuple[Any, ...] | None]
                   ) -> Callable[[Iterable[Any]], Iterator[WriterResult]]:
    """A function for `rdd.mapPartitions`: COPY this partition's rows (those `to_row` keeps) into staging."""

    def write(rows: Iterable[Any]) -> Iterator[WriterResult]:
        import psycopg2
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None, "copy_partition runs inside a Spark task"
        partition, attempt = context.partitionId(), context.attemptNumber()
        writer = writer_tag(nonce, context.taskAttemptId())
        prefix = f"{batch_id}\t{writer}\t"
        buffer = io.StringIO()
        written = 0
        for row in rows:
            values = to_row(row)
            if values is None:
                continue
            buffer.write(prefix + "\t".join(map(_text, values)) + "\n")
            written += 1
        if written:
            buffer.seek(0)
            connection = psycopg2.connect(dsn, application_name="eosbatch-executor")
            try:
                with connection, connection.cursor() as cursor:
                    cursor.copy_expert(f"COPY {table_sql} FROM STDIN", buffer)
            finally:
                connection.close()
        if attempt == 0 and partition == 0:
            faults.point("process.mid_staging")  # rows are committed in staging; this attempt now dies
        yield WriterResult(writer, written)

    return write
