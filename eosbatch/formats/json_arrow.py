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
When pyarrow refuses a run, a parse error names its row (the value: one per line): that value is left, the
values before it are taken, and the values after it are tried next. A refusal that names no row (a number out
of an INT's range, two objects in one value) leaves the rest of the batch. The values are joined into lines
once; each attempt parses a slice of them. The work is bounded: past ATTEMPTS calls to pyarrow the rest of the
batch is from_json's, so input malformed throughout costs a few parses more than from_json alone. Whatever is
not taken comes back as a null struct: from_json parses it, with its dead-letter reasons.

The differential test (tests/integration/test_json_arrow.py) runs a corpus of awkward values through both.
This module runs in the engine's Python workers: it imports pyarrow only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# Spark type (DataType.simpleString()) -> the pyarrow type that parses a JSON value exactly as from_json does.
ARROW_TYPES = {"string": "string", "boolean": "bool_", "int": "int32", "bigint": "int64", "double": "float64"}
ATTEMPTS = 32  # calls to pyarrow per Arrow batch of values (10,000 by default): past them, the rest is from_json's
MAX_BLOCK = 1 << 30  # bytes of one run pyarrow reads at once (its block size is an int32); a larger run: from_json
_ROW = re.compile(r"in row (\d+)$")  # pyarrow's parse errors name the row (the value, one per line)


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
    taken = _runs(candidates, schema)
    # Which candidates were taken, then which values: position i of the result -> row of the parsed rows.
    flags: list[pa.Array] = []
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
    """Which values pyarrow tries: those that start with `{` and end with `}` (never null: false). (A line break
    inside a value is whitespace to both parsers; a value of two objects gives two rows, and is refused.)"""
    import pyarrow.compute as pc

    return pc.fill_null(pc.and_(pc.starts_with(values, b"{"), pc.ends_with(values, b"}")), False)


def _runs(values: pa.Array, schema: pa.Schema) -> list[tuple[int, int, pa.Table]]:
    """The runs of `values` pyarrow took, in order: the values from the first not yet decided to the end are tried;
    a refusal that names its row leaves that value and takes the values before it; one that does not leaves
    the rest. At most ATTEMPTS calls: past them, the rest is from_json's."""
    import pyarrow as pa
    import pyarrow.compute as pc

    taken: list[tuple[int, int, pa.Table]] = []
    try:
        values.cast(pa.string())  # valid UTF-8 (Spark reads invalid bytes as U+FFFD, pyarrow would keep them)
    except pa.ArrowInvalid:
        return _runs_of_valid(values, schema)
    # One value per line, joined once; a run is a slice of the bytes: [ends[at - 1], ends[-1]).
    lines = pc.binary_join_element_wise(values, pa.repeat(pa.scalar(b"", values.type), len(values)),
                                         pa.scalar(b"\n", values.type))
    ends = pc.cumulative_sum(pc.binary_length(lines).cast(pa.int64()))
    data = lines.buffers()[2]
    count, at, attempts = len(values), 0, 0
    while at < count and attempts < ATTEMPTS:
        start = ends[at - 1].as_py() if at else 0
        table, row = _parse_bytes(data[start:ends[count - 1].as_py()], count - at, schema)
        attempts += 1
        if table is not None:
            taken.append((at, count, table))
            break
        if row is None or row >= count - at:
            break  # a refusal without its row: the rest is from_json's
        if row:  # pyarrow stops at a parse error: the values before it parse
            before, _ = _parse_bytes(data[start:ends[at + row - 1].as_py()], row, schema)
            attempts += 1
            if before is not None:
                taken.append((at, at + row, before))
        at += row + 1
    return taken


def _runs_of_valid(values: pa.Array, schema: pa.Schema) -> list[tuple[int, int, pa.Table]]:
    """_runs over the values between those that are not valid UTF-8 (left to from_json), for at most ATTEMPTS
    stretches of them: past those, the rest is from_json's."""
    flags = [_valid(v) for v in values.to_pylist()]  # pyarrow has no per-value UTF-8 check; a rare batch pays this
    taken: list[tuple[int, int, pa.Table]] = []
    at, stretches = 0, 0
    while at < len(flags) and stretches < ATTEMPTS:
        if not flags[at]:
            at += 1
            continue
        stop = flags.index(False, at) if False in flags[at:] else len(flags)
        taken += [(at + a, at + b, t) for a, b, t in _runs(values.slice(at, stop - at), schema)]
        at, stretches = stop, stretches + 1
    return taken


def _valid(value: bytes | None) -> bool:
    try:
        (value or b"").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _parse_bytes(data: pa.Buffer, rows: int, schema: pa.Schema) -> tuple[pa.Table | None, int | None]:
    """`rows` JSON lines as rows of `schema`; or None if pyarrow refuses any (or does not give one row each), with
    the row it names, if it names one."""
    import pyarrow as pa
    import pyarrow.json as pj

    if data.size >= MAX_BLOCK:
        return None, None
    try:
        table = pj.read_json(pa.BufferReader(data),
                             read_options=pj.ReadOptions(use_threads=False, block_size=max(data.size + 1, 1 << 16)),
                             parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore",
                                                           newlines_in_values=False))
    except (pa.ArrowException, ValueError, OverflowError) as refused:
        named = _ROW.search(str(refused))
        return None, int(named.group(1)) if named else None
    return (table, None) if table.num_rows == rows else (None, None)
