"""JSON values parsed by pyarrow's JSON reader (C++), for the records where it gives exactly what Spark's
from_json gives; the others are left to from_json (eosbatch.formats.json_format puts the two together).

Spark's from_json makes a Jackson parser per record through a java.io.Reader: measured on 1M order-like
records, the parse was half of the process step's JVM time. pyarrow parses a whole Arrow batch of values at
once. It is used only where the two cannot differ:
- the schema's fields are all of the types whose conversion is the same in both (ARROW_TYPES): a field of any
  other type (timestamps, decimals, floats, nested types) leaves the whole schema to from_json;
- a value is tried only if it starts with `{` and ends with `}` (Spark reads leading and trailing whitespace,
  or text after the object, its own way);
- a run of values is taken only if it is valid UTF-8 (Spark reads invalid bytes as U+FFFD, pyarrow would keep
  them) and pyarrow parses every one of them into exactly one row against the schema. pyarrow refuses, where
  from_json also refuses or converts: a value of another JSON type than the field's (from_json turns a number
  into a string field's text), a duplicate key, a number out of the field's range, single quotes, leading
  zeros, trailing commas, control characters and lone surrogates (\\ud800). A line break between tokens is
  whitespace to both; a value of two objects gives two rows, so its run is not taken.
A run that pyarrow refuses is split in halves, down to SMALLEST values, so one malformed record leaves only a
few values around it to from_json. Whatever is not taken comes back as a null struct: from_json parses it,
with its dead-letter reasons.

The differential test (tests/integration/test_json_arrow.py) runs a corpus of awkward values through both.
This module runs in the engine's Python workers: it imports pyarrow only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# Spark type (DataType.simpleString()) -> the pyarrow type that parses a JSON value exactly as from_json does.
ARROW_TYPES = {"string": "string", "boolean": "bool_", "int": "int32", "bigint": "int64", "double": "float64"}
SMALLEST = 32  # a refused run of values is split down to this many; a smaller refused run is from_json's


def eligible(fields: Sequence[tuple[str, str]]) -> bool:
    """Whether pyarrow may parse a schema of these (name, Spark type) fields: every type in ARROW_TYPES, and
    the names distinct."""
    names = [name for name, _ in fields]
    return bool(fields) and len(set(names)) == len(names) and all(kind in ARROW_TYPES for _, kind in fields)


def arrow_schema(fields: Sequence[tuple[str, str]]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, ARROW_TYPES[kind])()) for name, kind in fields])


def parse(values: pa.Array, fields: Sequence[tuple[str, str]], corrupt: str) -> pa.StructArray:
    """`values` (binary) as a struct of `fields` and a `corrupt` string field (always null, as from_json leaves
    it for a record it parsed): null for each value pyarrow does not take."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = arrow_schema(fields)
    names = [*(name for name, _ in fields), corrupt]
    tried = _tried(values)
    candidates = values.filter(tried)
    if len(candidates) == 0:
        return pa.StructArray.from_arrays([pa.nulls(len(values), t) for t in [*schema.types, pa.string()]],
                                          names=names, mask=pa.repeat(pa.scalar(True), len(values)))
    taken: list[tuple[int, int, pa.Table]] = []
    _parse_runs(candidates, 0, len(candidates), schema, taken)
    # Which candidates were taken, then which values: position i of the result -> row of the parsed rows.
    flags = [pa.repeat(pa.scalar(False), 0)]
    at = 0
    for start, stop, _ in taken:
        flags += [pa.repeat(pa.scalar(False), start - at), pa.repeat(pa.scalar(True), stop - start)]
        at = stop
    flags.append(pa.repeat(pa.scalar(False), len(candidates) - at))
    candidate_taken = pa.concat_arrays(flags)
    row_of_candidate = pc.subtract(pc.cumulative_sum(candidate_taken.cast(pa.int64())), 1)
    candidate_of_value = pc.subtract(pc.cumulative_sum(tried.cast(pa.int64())), 1)
    none = pa.scalar(None, pa.int64())
    row = pc.if_else(tried, pc.take(pc.if_else(candidate_taken, row_of_candidate, none),
                                    pc.if_else(tried, candidate_of_value, 0)), none)
    rows = (pa.concat_tables([t for _, _, t in taken]).combine_chunks() if taken
            else schema.empty_table())
    columns = [pc.take(rows.column(i), row) for i in range(len(fields))]
    return pa.StructArray.from_arrays([*(c.combine_chunks() for c in columns), pa.nulls(len(values), pa.string())],
                                      names=names, mask=pc.is_null(row))


def _tried(values: pa.Array) -> pa.Array:
    """Which values pyarrow tries: those that start with `{` and end with `}` (never null: false). (Searching
    every value for line breaks cost more than the parse; a run holding one is refused as a whole.)"""
    import pyarrow.compute as pc

    return pc.fill_null(pc.and_(pc.starts_with(values, b"{"), pc.ends_with(values, b"}")), False)


def _parse_runs(values: pa.Array, start: int, stop: int, schema: pa.Schema,
                taken: list[tuple[int, int, pa.Table]]) -> None:
    """Parse values[start:stop], or halves of it where pyarrow refuses, appending what it took, in order."""
    if start >= stop:
        return
    table = _parse_run(values.slice(start, stop - start), schema)
    if table is not None:
        taken.append((start, stop, table))
    elif stop - start > SMALLEST:
        middle = (start + stop) // 2
        _parse_runs(values, start, middle, schema, taken)
        _parse_runs(values, middle, stop, schema, taken)


def _parse_run(values: pa.Array, schema: pa.Schema) -> pa.Table | None:
    """The run of values as rows of `schema`, or None if pyarrow refuses any (or does not give one row each)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    try:
        values.cast(pa.string())  # validates the UTF-8
        lines = pc.binary_join_element_wise(values, pa.repeat(pa.scalar(b"", values.type), len(values)),
                                             pa.scalar(b"\n", values.type))
        size = pc.sum(pc.binary_length(lines)).as_py() or 0
        data = lines.buffers()[2][:size]
        table = pj.read_json(pa.BufferReader(data),
                             read_options=pj.ReadOptions(use_threads=False, block_size=max(size + 1, 1 << 16)),
                             parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore",
                                                           newlines_in_values=False))
    except (pa.ArrowException, ValueError):
        return None
    return table if table.num_rows == len(values) else None
