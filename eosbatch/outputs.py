"""How an output record's value is written (JsonValue, AvroValue) and which headers it copies: pure values,
validated when built, naming the field (output.value.schema, output.headers[...]); and whether a sink's
columns fit an Avro schema (`avro_misfits`), asked before a batch commits so that a mismatch is a
configuration error, not a publish that fails for ever after the COMMIT."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from eosbatch.exceptions import ConfigError

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
OWN_HEADER_PREFIX = "eosbatch."  # the headers eosbatch sets on every record (kafka/record.py)
MAGIC = 0  # the Confluent wire format: magic byte 0, the schema id (4 bytes, big-endian), Avro binary
MAX_SCHEMA_ID = 2**31 - 1


class AvroField(NamedTuple):
    """One field of an output record's Avro schema: a sink column of the same name, of one supported kind."""
    name: str
    kind: str        # a key of KIND_TYPES
    nullable: bool   # a union with "null"
    precision: int = 0  # decimal only
    scale: int = 0


# Each supported Avro type (logical types by their name) -> the PostgreSQL column types it takes exactly
# (format_type without the modifier): a value read from such a column encodes, and decodes back to it.
KIND_TYPES: dict[str, frozenset[str]] = {
    "boolean": frozenset({"boolean"}),
    "int": frozenset({"smallint", "integer"}),
    "long": frozenset({"smallint", "integer", "bigint"}),
    "float": frozenset({"real"}),
    "double": frozenset({"real", "double precision"}),
    "string": frozenset({"text", "character varying"}),
    "uuid": frozenset({"uuid", "text", "character varying"}),
    "bytes": frozenset({"bytea"}),
    "decimal": frozenset({"numeric"}),
    "date": frozenset({"date"}),
    "timestamp-millis": frozenset({"timestamp with time zone", "timestamp without time zone"}),
    "timestamp-micros": frozenset({"timestamp with time zone", "timestamp without time zone"}),
    "local-timestamp-millis": frozenset({"timestamp without time zone"}),
    "local-timestamp-micros": frozenset({"timestamp without time zone"}),
}
_LOGICAL = {("int", "date"): "date", ("long", "timestamp-millis"): "timestamp-millis",
            ("long", "timestamp-micros"): "timestamp-micros", ("string", "uuid"): "uuid",
            ("long", "local-timestamp-millis"): "local-timestamp-millis",
            ("long", "local-timestamp-micros"): "local-timestamp-micros", ("bytes", "decimal"): "decimal"}


@dataclass(frozen=True)
class JsonValue:
    """The value is the sink row as a JSON object (PostgreSQL's row_to_json): eosbatch's default."""


@dataclass(frozen=True)
class AvroValue:
    """The value is Avro in the Confluent wire format: byte 0, `schema_id` (4 bytes, big-endian), then the
    record's fields in Avro binary, each read from the sink column of its name. `schema`: the schema's JSON
    text, or a Path to a file holding it; a record of fields of the supported kinds (KIND_TYPES), a nullable
    one as a union with "null"."""

    schema: str | Path
    schema_id: int
    fields: tuple[AvroField, ...] = field(init=False, repr=False, compare=False)
    parsed: Any = field(init=False, repr=False, compare=False)  # fastavro's parsed schema

    def __post_init__(self) -> None:
        if isinstance(self.schema_id, bool) or not isinstance(self.schema_id, int) or not (
                0 <= self.schema_id <= MAX_SCHEMA_ID):
            raise ConfigError("output.value.schema_id", f"must be an int from 0 to {MAX_SCHEMA_ID}, "
                                                        f"got {self.schema_id!r}")
        text = _schema_text(self.schema)
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise ConfigError("output.value.schema", f"is not JSON: {exc}") from None
        if not isinstance(document, dict) or document.get("type") != "record" or not document.get("fields"):
            raise ConfigError("output.value.schema", "must be an Avro record schema with at least one field")
        import fastavro

        try:
            parsed = fastavro.parse_schema(document)
        except Exception as exc:  # noqa: BLE001 - fastavro raises several kinds; all mean a bad schema
            raise ConfigError("output.value.schema", f"is not a valid Avro schema: {exc}") from None
        fields = tuple(_field(i, f) for i, f in enumerate(document["fields"]))
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "parsed", parsed)

    @property
    def header(self) -> bytes:
        """The 5 bytes every value starts with."""
        return bytes([MAGIC]) + self.schema_id.to_bytes(4, "big")


def _schema_text(schema: object) -> str:
    if isinstance(schema, Path):
        try:
            return schema.read_text()
        except OSError as exc:
            raise ConfigError("output.value.schema", f"cannot read {schema}: {exc}") from None
    if not isinstance(schema, str) or not schema.strip():
        raise ConfigError("output.value.schema", f"must be the schema's JSON text or a Path, got {schema!r}")
    return schema


def _field(i: int, spec: Any) -> AvroField:
    where = f"output.value.schema.fields[{i}]"
    name = spec.get("name") if isinstance(spec, dict) else None
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise ConfigError(where, f"{name!r}: a field is read from the sink column of its name, so it must be a "
                                 "valid SQL identifier")
    where = f"output.value.schema field {name}"
    kind, nullable = spec["type"], False
    if isinstance(kind, list):
        others = [t for t in kind if t != "null"]
        if len(others) != 1 or len(kind) != 2:
            raise ConfigError(where, f"union {kind} is not supported: only a type or a union of it with \"null\"")
        kind, nullable = others[0], True
    base = str(kind.get("type")) if isinstance(kind, dict) else str(kind)
    logical = kind.get("logicalType") if isinstance(kind, dict) else None
    name_of = base if logical is None else _LOGICAL.get((base, str(logical)))
    if name_of not in KIND_TYPES:
        raise ConfigError(where, f"type {json.dumps(kind)} is not supported; use one of {sorted(KIND_TYPES)} "
                                 "(logical types by their name), or a union of one with \"null\"")
    if name_of == "decimal":
        precision, scale = kind.get("precision"), kind.get("scale", 0)
        if not isinstance(precision, int) or not isinstance(scale, int):
            raise ConfigError(where, "a decimal needs an int precision and scale")
        return AvroField(name, name_of, nullable, precision, scale)
    return AvroField(name, name_of, nullable)


OutputValue = JsonValue | AvroValue


def headers_map(value: object) -> tuple[tuple[str, str], ...]:
    """KafkaOutput.headers validated: output header name -> the sink column it is read from."""
    if not isinstance(value, Mapping):
        raise ConfigError("output.headers", f"must be a mapping of header name to sink column, got {value!r}")
    pairs = []
    for name, column in value.items():
        where = f"output.headers[{name!r}]"
        if not isinstance(name, str) or not name or name.startswith(OWN_HEADER_PREFIX):
            raise ConfigError(where, f"a header name must be a non-empty string not starting with "
                                     f"{OWN_HEADER_PREFIX!r} (eosbatch's own headers)")
        if not isinstance(column, str) or not _IDENTIFIER.fullmatch(column) or column.startswith("_eosbatch_"):
            raise ConfigError(where, f"{column!r} is not a valid sink column name")
        pairs.append((name, column))
    return tuple(pairs)


HEADER_TYPES = frozenset({"text", "character varying", "bytea"})  # a header's value is bytes: text as UTF-8


def base_type(pg_type: str) -> str:
    """`numeric(10,2)` -> numeric, `timestamp(3) with time zone` -> timestamp with time zone (and the short
    names eosbatch stages with, timestamptz and timestamp, as format_type spells them)."""
    base = re.sub(r"\(\d+(,\s*\d+)?\)", "", pg_type).strip()
    return _SPELLED.get(base, base)


_SPELLED = {"timestamptz": "timestamp with time zone", "timestamp": "timestamp without time zone",
            "varchar": "character varying", "int4": "integer", "int8": "bigint", "int2": "smallint"}


def _modifiers(pg_type: str) -> list[int]:
    found = re.search(r"\((\d+)(?:,\s*(\d+))?\)", pg_type)
    return [int(g) for g in found.groups() if g is not None] if found else []


def avro_misfits(value: AvroValue, sink_types: Mapping[str, str], not_null: Sequence[str]) -> list[str]:
    """Each field of `value`'s schema that the sink's columns (name -> type as declared) cannot fill exactly,
    one phrase each naming it: no such column, a type it does not take, a nullable column for a field that
    is not, a numeric whose precision or scale does not fit the decimal, a timestamp finer than millis."""
    problems = []
    for f in value.fields:
        declared = sink_types.get(f.name)
        if declared is None:
            problems.append(f"field {f.name}: the sink has no column {f.name}")
            continue
        base = base_type(declared)
        if base not in KIND_TYPES[f.kind]:
            problems.append(f"field {f.name} ({f.kind}): column {f.name} is {declared}; it takes "
                            f"{' or '.join(sorted(KIND_TYPES[f.kind]))}")
            continue
        if not f.nullable and f.name not in not_null:
            problems.append(f"field {f.name} is not nullable, but column {f.name} may hold NULL: make the "
                            f"field's type a union with \"null\"")
        mods = _modifiers(declared)
        if f.kind == "decimal":
            if len(mods) != 2 or mods[1] > f.scale or mods[0] - mods[1] > f.precision - f.scale:
                problems.append(f"field {f.name} is decimal({f.precision},{f.scale}), column {f.name} is "
                                f"{declared}: declare it numeric(p,s) with s <= {f.scale} and p - s <= "
                                f"{f.precision - f.scale}")
        elif f.kind.endswith("-millis") and (not mods or mods[0] > 3):
            problems.append(f"field {f.name} ({f.kind}) would cut column {f.name} ({declared}) to "
                            "milliseconds: use a -micros type, or declare the column timestamp(3)")
    return problems
