"""JSON objects, parsed against a Spark DDL schema (the `value_schema` eosbatch always had)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eosbatch.exceptions import ConfigError
from eosbatch.formats import json_arrow
from eosbatch.formats.base import Decoding, Format, Role, clashing_fields, reason

if TYPE_CHECKING:
    from pyspark.sql import Column
    from pyspark.sql.types import StructType

_CORRUPT = "_eosbatch_corrupt"


def ddl_field_names(ddl: str) -> list[str]:
    """The top-level field names of a Spark DDL schema ("a INT, b DECIMAL(18,2), c STRUCT<x: INT>")."""
    names, depth, piece = [], 0, ""
    for char in ddl + ",":
        if char in "<(":
            depth += 1
        elif char in ">)":
            depth -= 1
        if char == "," and depth == 0:
            text = piece.strip()
            if text.startswith("`"):
                names.append(text[1:text.index("`", 1)])
            elif text:
                names.append(text.split()[0].rstrip(":"))
            piece = ""
        else:
            piece += char
    return names


def struct(ddl: str) -> StructType:
    """A DDL field list as a Spark struct type."""
    from pyspark.sql.types import StructType

    parsed = StructType.fromDDL(ddl)
    assert isinstance(parsed, StructType), "a DDL field list parses to a struct"
    return parsed


def check_ddl(field: str, ddl: object, role: Role) -> str:
    """`ddl` if it is a DDL string a `role` may have (a value's fields may not take a record column's name)."""
    if not isinstance(ddl, str) or not ddl.strip():
        raise ConfigError(field, "must be a Spark DDL string such as 'id STRING, n INT'")
    if role == "value":
        clashing_fields(field, ddl_field_names(ddl))
    return ddl


@dataclass(frozen=True)
class Json(Format):
    """A JSON object per record, parsed against `schema`, a Spark DDL field list such as
    "customer_id STRING NOT NULL, amount DOUBLE".

    As a value, its fields become top-level columns (and `value` stays the raw bytes); as a key, `key` becomes a
    struct of them. A record that is not a JSON object, has a field of the wrong type, or lacks a NOT NULL field
    goes to the dead letters with the reason ("value: missing required field 'id'").

    `arrow`: parse with pyarrow's JSON reader the records where it gives exactly what Spark's from_json gives
    (eosbatch.formats.json_arrow: fields of STRING, BOOLEAN, INT, BIGINT and DOUBLE only; PySpark 4.1 or later),
    and the others with from_json, as always; False: from_json for every record."""

    schema: str
    arrow: bool = True

    def checked(self, field: str, role: Role) -> Json:
        check_ddl(f"{field}.schema", self.schema, role)
        return self

    def decoding(self, raw: Column, role: Role, temporary: str, schemas: Mapping[int, str | None]) -> Decoding:
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType, StructField, StructType

        declared = struct(self.schema)
        # Parsed as nullable so that a missing required field is reported by name instead of failing the read.
        relaxed = StructType([StructField(f.name, f.dataType, True) for f in declared.fields]
                             + [StructField(_CORRUPT, StringType(), True)])
        parsed = F.from_json(raw.cast("string"), relaxed, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT})
        fast = arrow_parser(relaxed) if self.arrow else None
        if fast is not None:  # from_json runs only for the records pyarrow leaves (a null struct)
            parsed = F.coalesce(fast(raw), parsed)
        checks = [(F.col(f"{temporary}.{_CORRUPT}").isNotNull(),
                   reason(role, f"not a JSON object matching schema ({self.schema})"))]
        checks += [(F.col(f"{temporary}.`{f.name}`").isNull(), reason(role, f"missing required field {f.name!r}"))
                   for f in declared.fields if not f.nullable]
        if role == "value":
            return Decoding(parsed, raw, checks, tuple(declared.fieldNames()), raw=True)
        fields = F.struct(*[F.col(f"{temporary}.`{f.name}`").alias(f.name) for f in declared.fields])
        return Decoding(parsed, F.when(raw.isNotNull(), fields), checks)


def arrow_parser(relaxed: StructType) -> Any:
    """A scalar Arrow UDF parsing a binary column into `relaxed` (its last field, the corrupt-record column, always
    null) where pyarrow gives what from_json gives, else null (eosbatch.formats.json_arrow); None when the schema
    has a type it leaves to from_json, or this PySpark has no Arrow UDFs (before 4.1)."""
    try:
        from pyspark.sql.functions import ArrowUDFType, arrow_udf
    except ImportError:
        return None
    *fields, corrupt = [(f.name, f.dataType.simpleString()) for f in relaxed.fields]
    if not json_arrow.eligible(fields):
        return None
    corrupt_name = corrupt[0]

    def eosbatch_json(values: Any) -> Any:
        from eosbatch.formats import json_arrow

        return json_arrow.parse(values, fields, corrupt_name)

    with warnings.catch_warnings():  # it prefers type hints, which `from __future__ import annotations` makes text
        warnings.simplefilter("ignore", UserWarning)
        return arrow_udf(eosbatch_json, relaxed, ArrowUDFType.SCALAR)
