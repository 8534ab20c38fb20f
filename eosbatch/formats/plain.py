"""The formats that parse nothing: the bytes as they are (Bytes), or as UTF-8 text (String)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from eosbatch.formats.base import Decoding, Format, Role, reason

if TYPE_CHECKING:
    from pyspark.sql import Column


@dataclass(frozen=True)
class Bytes(Format):
    """The key or value as it is, binary; it never fails to parse, and a null value reaches the transform
    (the default of both, as before eosbatch had formats)."""

    passes_null: ClassVar[bool] = True

    def checked(self, field: str, role: Role) -> Bytes:
        return self

    def decoding(self, raw: Column, role: Role, temporary: str, schemas: Mapping[int, str | None]) -> Decoding:
        return Decoding(None, raw, [], raw=True)


@dataclass(frozen=True)
class String(Format):
    """The key or value as UTF-8 text (a Kafka StringSerializer's); a record whose bytes are not valid UTF-8
    goes to the dead letters ("key: not valid UTF-8")."""

    def checked(self, field: str, role: Role) -> String:
        return self

    def decoding(self, raw: Column, role: Role, temporary: str, schemas: Mapping[int, str | None]) -> Decoding:
        from pyspark.sql import functions as F

        # A cast keeps the bytes as they are, valid or not: invalid text is null (and the record a dead letter).
        text = F.try_validate_utf8(raw.cast("string"))
        return Decoding(None, text, [(raw.isNotNull() & text.isNull(), reason(role, "not valid UTF-8"))])
