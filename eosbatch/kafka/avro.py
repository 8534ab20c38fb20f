"""An output record's Avro value in the Confluent wire format (byte 0, the schema id in 4 bytes big-endian, Avro
binary), encoded with fastavro from the typed fields publish reads (outbox.py: the same Python values from the
outbox and, for early publish, from staging; so the same bytes); and decoded again, for verify and the tests."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import fastavro

from eosbatch.exceptions import TerminalError
from eosbatch.outputs import MAGIC, AvroField, AvroValue


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value if isinstance(value, str) or value is None \
        else str(value)


def _raw(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


def _utc(value: Any) -> Any:
    """A timestamp without time zone is taken as UTC (fastavro would take a naive datetime as local time)."""
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value


def _converter(f: AvroField) -> Callable[[Any], Any] | None:
    if f.kind in ("string", "uuid"):
        return _text
    if f.kind == "bytes":
        return _raw
    if f.kind in ("timestamp-millis", "timestamp-micros"):
        return _utc
    return None


def encoder(value: AvroValue) -> Callable[[Sequence[Any]], bytes]:
    """The function from a row of the schema's fields (as psycopg2 reads them, text possibly as bytes) to the
    record's value. A value the schema cannot hold (avro_misfits refuses what it can tell beforehand; a
    numeric NaN, say) raises TerminalError naming the field: the batch's records cannot be published as they are."""
    names = [f.name for f in value.fields]
    converters = [_converter(f) for f in value.fields]
    schema, header = value.parsed, value.header
    plain = all(c is None for c in converters)

    def encode(row: Sequence[Any]) -> bytes:
        values = row if plain else [v if c is None else c(v) for c, v in zip(converters, row, strict=True)]
        record = dict(zip(names, values, strict=True))
        out = io.BytesIO()
        out.write(header)
        try:
            fastavro.schemaless_writer(out, schema, record)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            raise TerminalError(f"output.value.schema: a row cannot be written with this schema ({exc}): "
                                f"{_shown(record)}") from None
        return out.getvalue()

    return encode


def _shown(record: dict[str, Any]) -> str:
    text = repr(record)
    return text if len(text) <= 300 else text[:300] + "..."


def decode(value: AvroValue, data: bytes) -> dict[str, Any]:
    """A record's value back as a dict (fastavro's logical types: Decimal, datetime in UTC, date, bytes; a float
    as the float its shortest float32 text is)."""
    if len(data) < 5 or data[0] != MAGIC:
        raise ValueError(f"not the Confluent wire format (magic byte {data[:1]!r})")
    if int.from_bytes(data[1:5], "big") != value.schema_id:
        raise ValueError(f"schema id {int.from_bytes(data[1:5], 'big')}, expected {value.schema_id}")
    import numpy  # here, not at import: ~0.17 s a task process that publishes (verify decodes)

    decoded = fastavro.schemaless_reader(io.BytesIO(data[5:]), value.parsed, value.parsed)
    assert isinstance(decoded, dict)
    for f in value.fields:  # a float as its shortest float32 text, as PostgreSQL shows a real
        if f.kind == "float" and decoded.get(f.name) is not None:
            decoded[f.name] = float(str(numpy.float32(decoded[f.name])))
    return decoded
