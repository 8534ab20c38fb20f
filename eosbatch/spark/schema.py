"""Spark types to PostgreSQL types, for sink tables created from a transform's output.

A struct or a map is stored as jsonb (spark/shaping.py renders it with to_json before staging); an array of
a scalar type as a PostgreSQL array of that type; an array of anything else (structs, maps, arrays) as jsonb,
since PostgreSQL arrays are rectangular and hold no records here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import Column

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

_SIMPLE = {
    "string": "text", "int": "integer", "bigint": "bigint", "smallint": "smallint", "tinyint": "smallint",
    "double": "double precision", "float": "real", "boolean": "boolean", "timestamp": "timestamptz",
    "timestamp_ntz": "timestamp", "date": "date", "binary": "bytea",
}
JSONB = "jsonb"


def _scalar(name: str) -> str | None:
    if name in _SIMPLE:
        return _SIMPLE[name]
    if name.startswith("decimal("):
        return "numeric" + name[len("decimal"):]
    return None


def stored_as_json(data_type: DataType) -> bool:
    """Whether a column of this Spark type is stored as jsonb (rendered by to_json before staging)."""
    name = data_type.simpleString()
    if name.startswith(("struct<", "map<")):
        return True
    return name.startswith("array<") and _scalar(name[len("array<"):-1]) is None


def pg_type(column: str, data_type: DataType) -> str:
    name = data_type.simpleString()
    if (scalar := _scalar(name)) is not None:
        return scalar
    if stored_as_json(data_type):
        return JSONB
    if name.startswith("array<"):
        return f"{_scalar(name[len('array<'):-1])}[]"
    raise SinkError(f"sink: column {column!r} has Spark type {name}, which eosbatch cannot store "
                    f"(use one of {sorted(_SIMPLE)}, decimal, an array of them, a struct or a map)")


def columns(schema: StructType) -> list[Column]:
    return [Column(f.name, pg_type(f.name, f.dataType)) for f in schema.fields]
