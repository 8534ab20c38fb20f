"""Executors COPY their partition's rows into staging, tagged with the task attempt that wrote them.

Spark re-runs tasks (failures, speculation), and a failed attempt may already have written rows. So each
attempt tags its rows with a writer tag; the action returns, per partition, only the attempt that
succeeded, with its row count; the commit reads only those tags (the Hadoop output-committer idea), and
first checks that each one still holds exactly that many rows: staging is UNLOGGED, and a PostgreSQL crash
empties it. Nothing is collected on the driver but the tags and counts.

The tag is `<run nonce>:<task attempt id>`: Spark's task attempt id is unique within one application,
while `attemptNumber` restarts at 0 in every stage attempt (two attempts of one partition could share it).

Rows travel as Arrow record batches (`mapInArrow`: no RDD API, so it runs on Spark Connect too) and reach
PostgreSQL as binary COPY, encoded by pgpq: no Python loop over rows, no text formatting and parsing.

Dead letters are counted on the way in (an observation, in the JVM) and staged by a second Spark action
only when a batch has some: a Python pass over every record to split them off cost 2-2.5 s per million
records, paid by every batch; the second read costs only the batches that have malformed records.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from eosbatch import faults
from eosbatch.ledger.staging import copy_into_stage

if TYPE_CHECKING:
    import pyarrow as pa

Kind = Literal["sink", "dead_letters"]
RESULT_SCHEMA = "kind string, writer string, rows long"  # what each staging task returns to the driver
DEAD_LETTER_COLUMNS = ["topic", "partition", "offset", "key", "value"]  # + the error: staged_dead_letters' order
DEAD_LETTER_TIMES = ["timestamp", "timestampType"]  # after the error (migration 0011 added them)


class WriterResult(NamedTuple):
    writer: str
    rows: int


class StageTarget(NamedTuple):
    """Where one kind of row goes: the COPY target `table (batch, writer, columns...)` as SQL text, and the
    columns that arrive as JSON text to be encoded as jsonb."""
    kind: Kind
    copy_sql: str
    jsonb: tuple[str, ...] = ()


def writer_tag(nonce: str, task_attempt_id: int) -> str:
    return f"{nonce}:{task_attempt_id}"


def with_tags(batch: pa.RecordBatch, batch_id: int, writer: str) -> pa.RecordBatch:
    """The record batch with the staging table's two leading columns: the batch id and the writer tag."""
    import pyarrow as pa

    n = batch.num_rows
    # pa.repeat fills the arrays in C: from Python lists ([batch_id] * n) they took ~0.08 s per 1M rows.
    return pa.RecordBatch.from_arrays(
        [pa.repeat(pa.scalar(batch_id, pa.int64()), n), pa.repeat(pa.scalar(writer, pa.string()), n),
         *batch.columns], names=["_batch", "_writer", *batch.schema.names])


def _encoder(schema: pa.Schema, jsonb: tuple[str, ...]) -> Any:
    """pgpq's encoder of these columns: each as pgpq infers it (a list as a PostgreSQL array), the `jsonb` ones
    (JSON text) in jsonb's binary form."""
    import pyarrow as pa
    from pgpq import ArrowToPostgresBinaryEncoder
    from pgpq.encoders import LargeStringEncoderBuilder, StringEncoderBuilder
    from pgpq.schema import Jsonb

    if not jsonb:
        return ArrowToPostgresBinaryEncoder(schema)

    def as_jsonb(field: pa.Field) -> Any:
        builder = LargeStringEncoderBuilder if pa.types.is_large_string(field.type) else StringEncoderBuilder
        return builder.new_with_output(field, Jsonb())

    encoders = {f.name: as_jsonb(f) if f.name in jsonb else ArrowToPostgresBinaryEncoder.infer_encoder(f)
                for f in schema}
    return ArrowToPostgresBinaryEncoder.new_with_encoders(schema, encoders)


def binary_copy(batches: Iterable[pa.RecordBatch], batch_id: int, writer: str,
                jsonb: tuple[str, ...] = ()) -> tuple[io.BytesIO, int]:
    """PostgreSQL's binary COPY stream of these record batches (tags first); and the rows in it."""

    buffer, encoder, rows = io.BytesIO(), None, 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        tagged = with_tags(batch, batch_id, writer)
        if encoder is None:
            encoder = _encoder(tagged.schema, jsonb)
            buffer.write(encoder.write_header())
        buffer.write(encoder.write_batch(tagged))
        rows += batch.num_rows
    if encoder is not None:
        buffer.write(encoder.finish())
    buffer.seek(0)
    return buffer, rows


def stage_partition(dsn: str, target: StageTarget, nonce: str, batch_id: int, fault: Mapping[str, str]
                    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A function for `DataFrame.mapInArrow`: COPY this partition's rows into staging and return one row,
    (kind, writer, rows). `fault` is the driver's fault setting (faults.carried): executors do not see the
    runner's environment."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None, "stage_partition runs inside a Spark task"
        writer = writer_tag(nonce, context.taskAttemptId())
        buffer, written = binary_copy(batches, batch_id, writer, target.jsonb)
        if written:
            copy_into_stage(dsn, target.copy_sql, buffer)
            if target.kind == "sink" and context.attemptNumber() == 0:
                faults.point("process.mid_staging", fault)  # rows are committed in staging; this attempt dies
        yield pa.RecordBatch.from_pylist([{"kind": target.kind, "writer": writer, "rows": written}],
                                         schema=pa.schema([("kind", pa.string()), ("writer", pa.string()),
                                                           ("rows", pa.int64())]))

    return write

