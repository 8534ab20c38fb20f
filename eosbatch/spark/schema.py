"""Spark types to PostgreSQL types, for sink tables created from a transform's output."""

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


def pg_type(column: str, data_type: DataType) -> str:
    name = data_type.simpleString()
    if name in _SIMPLE:
        return _SIMPLE[name]
    if name.startswith("decimal("):
        return "numeric" + name[len("decimal"):]
    raise SinkError(f"sink: column {column!r} has Spark type {name}, which eosbatch cannot store "
                    f"(use one of {sorted(_SIMPLE)} or decimal)")


def columns(schema: StructType) -> list[Column]:
    return [Column(f.name, pg_type(f.name, f.dataType)) for f in schema.fields]
