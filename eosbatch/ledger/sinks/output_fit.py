"""Whether the transform's columns and the sink's make the output a pipeline declares: its key's and copied
headers' columns are there (a header from a text or bytea column), and each field of an Avro value's schema
has a sink column it takes exactly (outputs.avro_misfits). Asked when a batch is processed (before anything
commits: a mismatch found at publish would fail after the COMMIT, for ever) and by `eosbatch check`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from psycopg2 import sql

from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks.catalog import SinkShape
from eosbatch.ledger.sinks.names import Column, sink_table
from eosbatch.ledger.store import Cursor
from eosbatch.outputs import HEADER_TYPES, AvroValue, avro_misfits, base_type
from eosbatch.pipeline import KafkaOutput, Pipeline


def column_problems(output: KafkaOutput, columns: Sequence[Column]) -> list[str]:
    """The output's key and header columns against the transform's `columns`, one phrase each naming the field."""
    types = {c.name: c.pg_type for c in columns}
    names = list(types)
    problems = []
    if missing := [k for k in output.key_columns if k not in types]:
        shown = repr(missing[0]) if not output.composite else str(missing)
        problems.append(f"output.key: the transform's output lacks {shown}; it has {names}")
    for header, column in output.headers.items():
        where = f"output.headers[{header!r}]"
        if column not in types:
            problems.append(f"{where}: the transform's output lacks column {column!r}; it has {names}")
        elif base_type(types[column]) not in HEADER_TYPES:
            problems.append(f"{where}: column {column} is {types[column]}; a header is copied from a text or "
                            "bytea column (cast it in the transform)")
    return problems


def sink_problems(output: KafkaOutput, sink_types: Mapping[str, str], not_null: Sequence[str]) -> list[str]:
    """The output's value against the sink's columns (name -> type as declared) and its NOT NULL ones."""
    if not isinstance(output.value, AvroValue):
        return []
    return [f"output.value.schema: {p}" for p in avro_misfits(output.value, sink_types, not_null)]


def not_null_columns(cur: Cursor, table: sql.Identifier) -> list[str]:
    schema, name = table.strings
    cur.execute("SELECT a.attname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
                "AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull", (schema, name))
    return [n for (n,) in cur.fetchall()]


def value_problems(cur: Cursor, pipeline: Pipeline, shape: SinkShape, columns: Sequence[Column]) -> list[str]:
    """The problems of the pipeline's output value with the sink as it is, or as the first batch creates it
    from the transform's `columns` (their types, NOT NULL on the key)."""
    output = pipeline.output
    if output is None or not isinstance(output.value, AvroValue):
        return []
    if shape.sink_exists:
        sink_types: Mapping[str, str] = shape.sink_types
        not_null: Sequence[str] = not_null_columns(cur, sink_table(pipeline))
    else:
        sink_types, not_null = {c.name: c.pg_type for c in columns}, list(pipeline.sink.key)
    return sink_problems(output, sink_types, not_null)


def output_problems(cur: Cursor, pipeline: Pipeline, shape: SinkShape, columns: Sequence[Column]) -> list[str]:
    """Every problem of the pipeline's output with the transform's `columns` and the sink (`eosbatch check`)."""
    if pipeline.output is None:
        return []
    return column_problems(pipeline.output, columns) + value_problems(cur, pipeline, shape, columns)


def check_columns(pipeline: Pipeline, columns: Sequence[Column]) -> None:
    """SinkError (terminal: the pipeline or the transform must change) naming the output's columns' problems."""
    if pipeline.output is not None and (problems := column_problems(pipeline.output, columns)):
        raise SinkError("; ".join(problems))


def check_value(cur: Cursor, pipeline: Pipeline, shape: SinkShape, columns: Sequence[Column]) -> None:
    """SinkError naming each field of the output's schema that the sink cannot fill."""
    if problems := value_problems(cur, pipeline, shape, columns):
        raise SinkError("; ".join(problems))
