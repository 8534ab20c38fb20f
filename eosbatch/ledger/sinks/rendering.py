"""How an output record is rendered from a result row `r`, built without I/O, the same for the outbox and for
early publish (so both produce the same bytes): its key (one column's text, or the JSON object of several),
the columns its copied headers come from, its value (the row as JSON, or the Avro fields, typed, which
kafka/avro.py encodes), and a bound on its size for the commit's check against the topic's limit."""

from __future__ import annotations

from psycopg2 import sql

from eosbatch.ledger.sinks.names import Column
from eosbatch.outputs import AvroField, AvroValue
from eosbatch.pipeline import KafkaOutput

# The longest text (and JSON) form of a value of these types: a bound with no cast to text per row (casting
# numbers took 0.15 s of a 1M-record commit, twice). -2147483648; -9223372036854775808; shortest-exact floats
# such as -1.17549435e-38 and -2.2250738585072014e-308; "-Infinity" and "NaN" are shorter; false.
TEXT_WIDTH = {"smallint": 6, "integer": 11, "bigint": 20, "real": 15, "double precision": 24, "boolean": 5}
# The most bytes of a value of each Avro kind with a fixed bound (varints: 5 for an int, 10 for a long).
AVRO_WIDTH = {"boolean": 1, "int": 5, "date": 5, "long": 10, "float": 4, "double": 8,
              "timestamp-millis": 10, "timestamp-micros": 10, "local-timestamp-millis": 10,
              "local-timestamp-micros": 10}
LENGTH_PREFIX = 10  # a string's or bytes' length, a long varint
HEADER_FRAMING = 10  # a header's name and value lengths (varints) in a record of Kafka's format v2
WIRE_HEADER = 5  # Confluent's magic byte and schema id


def key(output: KafkaOutput, alias: str) -> sql.Composed:
    """The output record's key from row `alias`, as text: one column's text, or the JSON object of the key's
    columns in their order, rendered by row_to_json as the value is (`{"a":1,"b":"x"}`)."""
    if not output.composite:
        return sql.SQL("{}.{}::text").format(sql.Identifier(alias), sql.Identifier(output.key_columns[0]))
    return sql.SQL("row_to_json((SELECT _eosbatch_key FROM (SELECT {}) _eosbatch_key))::text").format(
        sql.SQL(", ").join(sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(c))
                           for c in output.key_columns))


def published(output: KafkaOutput, alias: str) -> sql.Composed:
    """The columns after a record's source: its copied headers' columns (as stored: text or bytea), then its
    value: the row as JSON text, or the Avro schema's fields, typed."""
    headers = [sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(c)) for c in output.headers.values()]
    if isinstance(output.value, AvroValue):
        values = [sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(f.name))
                  for f in output.value.fields]
    else:
        values = [sql.SQL("row_to_json({}.*)::text").format(sql.Identifier(alias))]
    return sql.SQL(", ").join([*headers, *values])


def plain_json(alias: str) -> sql.Composed:
    """`published` for records whose value is JSON and that copy no header (an outbox written as JSON)."""
    return sql.SQL("row_to_json({}.*)::text").format(sql.Identifier(alias))


def json_size_bound(columns: list[Column], key_column: str | None) -> sql.Composed:
    """An upper bound of `octet_length(row_to_json(r.*)::text)` plus the length of column `key_column`'s text
    (None: nothing more), from the columns' text lengths (for TEXT_WIDTH's types, their longest): JSON
    escaping makes a character at most 6 bytes (\\u00XX), and each column adds its quoted name, a colon, a
    comma and at most two quotes around its value (or `null`). Types render in JSON no longer than 6x their
    text form (timestamps gain a T, quotes and a longer offset; bytea doubles backslashes)."""
    fixed = 2 + sum(6 * len(c.name.encode()) + 10 + 6 * TEXT_WIDTH.get(c.pg_type, 0) for c in columns)
    lengths = [sql.SQL("coalesce(octet_length(r.{}::text), 0)").format(sql.Identifier(c.name))
               for c in columns if c.pg_type not in TEXT_WIDTH]
    key_length: sql.Composable = sql.SQL("0")
    if key_column is not None:
        key_type = next((c.pg_type for c in columns if c.name == key_column), None)
        key_length = sql.Literal(TEXT_WIDTH[key_type]) if key_type in TEXT_WIDTH else sql.SQL(
            "coalesce(octet_length(r.{}::text), 0)").format(sql.Identifier(key_column))
    return sql.SQL("({} + 6 * ({}) + {})").format(
        sql.Literal(fixed), sql.SQL(" + ").join(lengths) if lengths else sql.SQL("0"), key_length)


def _key_size(output: KafkaOutput) -> sql.Composed:
    return sql.SQL("coalesce(octet_length({}), 0)").format(key(output, "r"))


def _key_bound(columns: list[Column], output: KafkaOutput) -> sql.Composed:
    if not output.composite:
        return _single_key_bound(columns, output.key_columns[0])
    return json_size_bound([c for c in columns if c.name in output.key_columns], None)


def _single_key_bound(columns: list[Column], column: str) -> sql.Composed:
    key_type = next((c.pg_type for c in columns if c.name == column), None)
    if key_type in TEXT_WIDTH:
        return sql.SQL("{}").format(sql.Literal(TEXT_WIDTH[key_type]))
    return sql.SQL("coalesce(octet_length(r.{}::text), 0)").format(sql.Identifier(column))


def _headers_size(output: KafkaOutput) -> sql.Composed:
    """The copied headers' bytes: name, value (text as UTF-8, or bytea) and framing."""
    terms = [sql.SQL("{} + coalesce(octet_length(r.{}), 0)").format(
        sql.Literal(len(name.encode()) + HEADER_FRAMING), sql.Identifier(column))
        for name, column in output.headers.items()]
    return sql.SQL("({})").format(sql.SQL(" + ").join(terms) if terms else sql.SQL("0"))


def _avro_field_bound(f: AvroField) -> tuple[int, sql.Composable | None]:
    """(fixed bytes, a per-row length or None) at most a field's Avro encoding takes."""
    union = 1 if f.nullable else 0  # the branch's index, a varint below 64
    if f.kind in AVRO_WIDTH:
        return union + AVRO_WIDTH[f.kind], None
    if f.kind == "decimal":  # two's complement of at most `precision` digits: under precision / 2 + 1 bytes
        return union + LENGTH_PREFIX + f.precision, None
    return union + LENGTH_PREFIX, sql.SQL("coalesce(octet_length(r.{}::{}), 0)").format(
        sql.Identifier(f.name), sql.SQL("bytea" if f.kind == "bytes" else "text"))


def avro_size_bound(value: AvroValue) -> sql.Composed:
    """An upper bound of the Avro value's size in the wire format (the 5-byte header included): each field at
    most its kind's width, a string or bytes its octets and a length prefix, a nullable one a branch index."""
    bounds = [_avro_field_bound(f) for f in value.fields]
    fixed = WIRE_HEADER + sum(n for n, _ in bounds)
    lengths = [length for _, length in bounds if length is not None]
    return sql.SQL("({} + {})").format(sql.Literal(fixed), sql.SQL(" + ").join(lengths) if lengths else sql.SQL("0"))


def record_size(output: KafkaOutput) -> sql.Composed:
    """The size of result row `r`'s output record: its value (JSON exactly; Avro: avro_size_bound), its key,
    its copied headers."""
    value = avro_size_bound(output.value) if isinstance(output.value, AvroValue) else sql.SQL(
        "octet_length(row_to_json(r.*)::text)")
    return sql.SQL("{} + {} + {}").format(value, _key_size(output), _headers_size(output))


def record_fits(result_columns: list[Column], output: KafkaOutput) -> sql.Composed:
    """Whether result row `r`'s output record fits in `max_bytes`. Rendering every row as JSON only to measure
    it cost seconds per million rows: a cheap upper bound settles all but rows near the limit (CASE keeps the
    exact size from being computed for the rest). An Avro value's size is a bound already."""
    if isinstance(output.value, AvroValue):
        return sql.SQL("{} <= %(max_bytes)s").format(record_size(output))
    bound = sql.SQL("{} + {} + {}").format(json_size_bound(result_columns, None), _key_bound(result_columns, output),
                                           _headers_size(output))
    return sql.SQL("CASE WHEN {} <= %(max_bytes)s THEN true ELSE {} <= %(max_bytes)s END").format(
        bound, record_size(output))
