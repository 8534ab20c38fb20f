"""Avro in the Confluent wire format, decoded in the JVM by spark-avro's from_avro (the jar `eosbatch stack up`
fetches with the Kafka connector, of the installed PySpark's version).

Each record names its writer schema by id (eosbatch.formats.wire); the batch's ids are resolved to schemas at
process time (eosbatch.formats.schemas.resolve) and each record is decoded with its writer schema, read as the
pipeline's reader schema (Avro's schema resolution: a field added with a default, a widened type, ...)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eosbatch.exceptions import ConfigError
from eosbatch.formats import wire
from eosbatch.formats.base import Decoding, Format, Role, clashing_fields, reason
from eosbatch.formats.schemas import MappedSchemas, WriterSchemas, avro_schema

if TYPE_CHECKING:
    from pyspark.sql import Column

_MAX_LENGTH = 2**31 - 1  # substring's "to the end"


# from_avro's PERMISSIVE mode gives a record that does not decode as a row of nulls, which a record of nullable
# fields may be: the reader schema gets one more field, with a default, which every record that decodes has.
DECODED = "_eosbatch_decoded"


def _with_mark(reader: str) -> tuple[str, bool]:
    """The reader schema with the DECODED field added if it is a record; whether it is one."""
    schema = json.loads(reader)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return reader, False
    marked = {**schema, "fields": [*schema["fields"], {"name": DECODED, "type": "boolean", "default": True}]}
    return json.dumps(marked), True


@dataclass(frozen=True)
class Avro(Format):
    """Avro records in the Confluent wire format (a magic byte 0, the writer schema's id in 4 big-endian bytes,
    the Avro binary), as Confluent's serializers write them.

    `reader_schema`: the schema the transform sees (JSON text, or a Path to an .avsc file); as a value it must
    be a record, whose fields become top-level columns (`value` stays the raw bytes); as a key, `key` becomes
    its decoded value (a struct for a record). `writer_schemas`: where each record's writer schema comes from,
    by id: a map {schema id: schema text or Path} (MappedSchemas), or any WriterSchemas such as a schema
    registry. A record written with an older, compatible schema is read as the reader schema. A record with an
    unknown id, without the wire format's header, or that does not decode goes to the dead letters with the
    reason; a source that cannot be reached fails the batch as a transient error (it is retried)."""

    reader_schema: str | Path
    writer_schemas: Mapping[int, str | Path] | WriterSchemas | None = None

    def checked(self, field: str, role: Role) -> Avro:
        text, parsed = avro_schema(f"{field}.reader_schema", self.reader_schema)
        if role == "value":
            if not isinstance(parsed, dict) or parsed.get("type") != "record":
                raise ConfigError(f"{field}.reader_schema", "a value's reader schema must be an Avro record: its "
                                                            "fields become the transform's columns")
            clashing_fields(f"{field}.reader_schema", [f["name"] for f in parsed["fields"]])
        if isinstance(parsed, dict) and DECODED in [f["name"] for f in parsed.get("fields", [])]:
            raise ConfigError(f"{field}.reader_schema", f"the field name {DECODED} is eosbatch's own")
        source: Any = self.writer_schemas
        if isinstance(source, Mapping):
            source = MappedSchemas(source, f"{field}.writer_schemas")
        elif source is None:
            raise ConfigError(f"{field}.writer_schemas", "required: a map {schema id: writer schema (JSON text or "
                                                         "a Path)}, or a schema registry")
        elif not isinstance(source, WriterSchemas):
            raise ConfigError(f"{field}.writer_schemas", f"must be a map {{schema id: writer schema}} or an object "
                                                         f"with schema(schema_id) -> str | None, got {source!r}")
        return replace(self, reader_schema=text, writer_schemas=source)

    @property
    def schema_source(self) -> WriterSchemas | None:
        source = self.writer_schemas
        return source if isinstance(source, WriterSchemas) else None

    def decoding(self, raw: Column, role: Role, temporary: str, schemas: Mapping[int, str | None]) -> Decoding:
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import from_avro

        reader, marked = _with_mark(str(self.reader_schema))
        header = F.substring(raw, 1, wire.HEADER_BYTES)
        payload = F.substring(raw, wire.HEADER_BYTES + 1, _MAX_LENGTH)
        known = {i: text for i, text in sorted(schemas.items()) if text is not None}

        def decode(writer: str) -> Column:  # resolved from the writer's schema to the (marked) reader's
            return from_avro(payload, writer, {"mode": "PERMISSIVE", "avroSchema": reader})

        if known:
            decoded = None
            for schema_id, writer in known.items():
                matches = header == F.lit(wire.header(schema_id))
                decoded = F.when(matches, decode(writer)) if decoded is None else decoded.when(matches, decode(writer))
        else:  # nothing to decode: a column of the reader schema's type, always null
            decoded = F.when(F.lit(False), decode(reader))
        id_text = F.conv(F.hex(F.substring(raw, 2, 4)), 16, 10)
        checks = [
            (F.length(raw) < wire.HEADER_BYTES,
             reason(role, F.length(raw).cast("string"), " bytes: too short for the Confluent wire format (a magic "
                                                        "byte 0 and a 4-byte schema id, then Avro)")),
            (F.substring(raw, 1, 1) != F.lit(bytes([wire.MAGIC])),
             reason(role, "not the Confluent wire format: its first byte is 0x", F.hex(F.substring(raw, 1, 1)),
                    ", not the magic byte 0")),
            (~header.isin([F.lit(wire.header(i)) for i in known]) if known else F.lit(True),
             reason(role, "unknown Avro schema id ", id_text, f" (not found in {self.writer_schemas})")),
            (F.col(f"{temporary}.{DECODED}").isNull() if marked else F.col(temporary).isNull(),
             reason(role, "not decodable as Avro written with schema id ", id_text, " read as the reader schema")),
        ]
        if role == "value":
            fields = tuple(f["name"] for f in json.loads(str(self.reader_schema))["fields"])
            return Decoding(decoded, raw, checks, fields, raw=True)
        key = F.col(temporary).dropFields(DECODED) if marked else F.col(temporary)
        return Decoding(decoded, key, checks)
