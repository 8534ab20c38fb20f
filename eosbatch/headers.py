"""For transforms: a header of the input record as a column, so that the sink stores it and the output copies
it (KafkaOutput.headers; docs/output.md). The reader keeps Kafka's headers in the column `headers`,
array<struct<key: string, value: binary>>."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def header_value(name: str, binary: bool = False, headers: str = "headers") -> Column:
    """The value of the input record's header `name` (the last one, when a record repeats it, as Kafka's
    lastHeader), as a string (UTF-8), or as binary with `binary=True`; NULL where the record has no such
    header. Built with DataFrame functions only: no Python runs per row."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"header_value: a header name must be a non-empty string, got {name!r}")
    from pyspark.sql import functions as F

    found = F.aggregate(F.col(headers), F.lit(None).cast("binary"),
                        lambda last, h: F.when(h["key"] == F.lit(name), h["value"]).otherwise(last))
    return found if binary else found.cast("string")
