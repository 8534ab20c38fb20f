"""What a key or value format is: an object that checks itself when its source is built, and gives the reader
the Spark expressions that parse a record's bytes and say why a record does not parse.

The reader (eosbatch.spark.reader) never asks which format it holds: it asks each for its `Decoding`. A new
format is a class with `checked` and `decoding` (and `schema_source`, if each record names its schema by id).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

if TYPE_CHECKING:
    from pyspark.sql import Column

    from eosbatch.formats.schemas import WriterSchemas

Role = Literal["key", "value"]

# The columns every record has before a value's fields are added (the value's fields may not take them).
KAFKA_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers")
ERROR_COLUMN = "_eosbatch_error"


class Decoding(NamedTuple):
    """How one role's bytes (the `raw` column) become what the transform sees, as Spark expressions.

    `temporary`: an expression the reader evaluates once into a column of its own (its name was passed to
    `decoding`) before the others read it by that name; None: none. `column`: what the transform sees as the
    role's column. `checks`: (condition, reason) pairs in order; the first that holds is the record's error
    (the reader checks a key's only when the key is not null). `fields`: the names of the temporary struct's
    fields that the transform also sees at top level (a value's fields). `raw`: `column` is the record's bytes
    as they are (so a dead letter can keep it)."""

    temporary: Column | None
    column: Column
    checks: list[tuple[Column, Column]]
    fields: tuple[str, ...] = ()
    raw: bool = False


class Format(ABC):
    """A record's key or value format (eosbatch.formats: Json, Avro, String, Bytes)."""

    # False: a null value is a tombstone, not a value of this format (a dead letter unless the sink deletes).
    passes_null: ClassVar[bool] = False

    @abstractmethod
    def checked(self, field: str, role: Role) -> Format:
        """This format validated as the source's `role` (a copy with files read, names normalised);
        ConfigError naming the field under `field` (e.g. "source.value.reader_schema")."""

    @abstractmethod
    def decoding(self, raw: Column, role: Role, temporary: str, schemas: Mapping[int, str | None]) -> Decoding:
        """The Spark expressions that parse `raw`. `schemas`: the writer schema of each schema id the batch
        holds (None: unknown), for formats with a `schema_source`; {} for a plan analysed without data."""

    @property
    def schema_source(self) -> WriterSchemas | None:
        """Where the writer schemas of the ids in the records come from (once `checked`); None: the records
        carry no schema ids."""
        return None


def reason(role: Role, *parts: Any) -> Column:
    """A dead letter's reason naming the role ("value: ..."), of literal text and string columns."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    pieces: list[Any] = [f"{role}: "]
    for part in parts:
        if isinstance(part, Column) or not isinstance(pieces[-1], str):
            pieces.append(part if isinstance(part, Column) else str(part))
        else:
            pieces[-1] += str(part)
    columns = [p if isinstance(p, Column) else F.lit(p) for p in pieces]
    return columns[0] if len(columns) == 1 else F.concat(*columns)


def clashing_fields(field: str, names: list[str]) -> None:
    """ConfigError when a value's fields would take the name of a record's column."""
    taken = {c.lower() for c in KAFKA_COLUMNS} | {ERROR_COLUMN}
    clashes = [n for n in names if n.lower() in taken]
    if clashes:
        from eosbatch.exceptions import ConfigError

        raise ConfigError(field, f"field(s) {', '.join(clashes)} collide with the record's Kafka columns "
                                 f"({', '.join(KAFKA_COLUMNS)}); parse such values in the transform")
