"""The Confluent wire format's header: a magic byte 0, then the writer schema's id as 4 big-endian bytes, then
the Avro binary encoding of the record (pure helpers; the decoding itself runs in the JVM, spark-avro)."""

from __future__ import annotations

MAGIC = 0
HEADER_BYTES = 5  # the magic byte and the schema id
MAX_SCHEMA_ID = 2**31 - 1  # a registry's ids are Java ints; the header holds them unsigned


def header(schema_id: int) -> bytes:
    """The 5 bytes that start every record written with `schema_id`."""
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"schema id {schema_id} is outside 0..{MAX_SCHEMA_ID}")
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big")


def schema_id(data: bytes) -> int | None:
    """The schema id in the header that starts `data`; None when `data` does not start with one (too short, or
    its first byte is not the magic byte 0)."""
    if len(data) < HEADER_BYTES or data[0] != MAGIC:
        return None
    return int.from_bytes(data[1:HEADER_BYTES], "big")


def framed(writer_id: int, avro_binary: bytes) -> bytes:
    """A record in the wire format: the header, then the Avro binary (what a Confluent serializer writes)."""
    return header(writer_id) + avro_binary
