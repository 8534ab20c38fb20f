"""The formats' pure parts: their validation when a source is built (a ConfigError naming the field), the
Confluent wire format's header, and which writer schema a batch decodes each schema id with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eosbatch.exceptions import ConfigError, TransientError
from eosbatch.formats import Avro, Bytes, Json, MappedSchemas, String, WriterSchemas, wire
from eosbatch.formats.schemas import from_json, resolve, to_json
from eosbatch.pipeline import KafkaSource

pytestmark = pytest.mark.unit

RECORD = json.dumps({"type": "record", "name": "Customer",
                     "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long"}]})
OLDER = json.dumps({"type": "record", "name": "Customer", "fields": [{"name": "id", "type": "string"}]})


def refused(field: str, match: str = "", **source: object) -> ConfigError:
    with pytest.raises(ConfigError, match=match) as raised:
        KafkaSource(["t"], **source)  # type: ignore[arg-type]
    assert raised.value.field == field, raised.value
    return raised.value


# ---------------------------------------------------------------- the wire format's header

def test_the_header_is_a_magic_byte_and_a_big_endian_id() -> None:
    assert wire.header(1) == b"\x00\x00\x00\x00\x01"
    assert wire.header(258) == b"\x00\x00\x00\x01\x02"
    assert wire.header(wire.MAX_SCHEMA_ID) == b"\x00\x7f\xff\xff\xff"
    assert wire.framed(5, b"avro") == b"\x00\x00\x00\x00\x05avro"
    for schema_id in (0, 1, 258, 70_000, wire.MAX_SCHEMA_ID):
        assert wire.schema_id(wire.framed(schema_id, b"")) == schema_id
    for bad in (-1, wire.MAX_SCHEMA_ID + 1):
        with pytest.raises(ValueError, match="outside"):
            wire.header(bad)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01", b'{"id": 1}'])
def test_no_id_without_the_whole_header_and_the_magic_byte(data: bytes) -> None:
    assert wire.schema_id(data) is None


# ---------------------------------------------------------------- which schema an id decodes with

class Source:
    """A WriterSchemas that counts what it was asked."""

    def __init__(self, known: dict[int, str], reachable: bool = True) -> None:
        self.known, self.reachable = known, reachable
        self.asked: list[int] = []

    def schema(self, schema_id: int) -> str | None:
        self.asked.append(schema_id)
        if not self.reachable:
            raise TransientError("registry unreachable")
        return self.known.get(schema_id)


def test_an_id_resolves_from_the_batch_then_earlier_batches_then_the_source() -> None:
    source = Source({1: "s1-now", 2: "s2-now", 3: "s3", 7: "s7-now"})
    found = resolve([1, 2, 3, 7, 9, 3], pinned={1: "s1-first", 7: None}, used={2: "s2-earlier"}, source=source)
    # pinned (a retried process, a replay) wins, unknown ids included; then earlier batches; then the source
    assert found == {1: "s1-first", 2: "s2-earlier", 3: "s3", 7: None, 9: None}
    assert source.asked == [3, 9]  # asked once per id, only for what neither the batch nor the pipeline holds
    assert isinstance(source, WriterSchemas)


def test_an_unreachable_source_is_transient_but_is_not_asked_for_ids_already_kept() -> None:
    down = Source({}, reachable=False)
    assert resolve([1], pinned={}, used={1: "s1"}, source=down) == {1: "s1"}
    with pytest.raises(TransientError):
        resolve([1, 2], pinned={}, used={1: "s1"}, source=down)


def test_the_sets_kept_with_a_batch_round_trip_through_json() -> None:
    sets = {"value": {2: "s2", 10: None}, "key": {1: "k1"}}
    stored = json.loads(json.dumps(to_json(sets)))
    assert stored == {"key": {"1": "k1"}, "value": {"10": None, "2": "s2"}}
    assert from_json(stored) == sets
    assert from_json(None) == {} and from_json([1]) == {}


def test_a_mapped_source_knows_its_ids_only() -> None:
    mapped = MappedSchemas({1: OLDER, 2: RECORD})
    assert mapped.schema(2) == RECORD and mapped.schema(3) is None
    assert mapped == MappedSchemas({2: RECORD, 1: OLDER}) and hash(mapped) == hash(MappedSchemas({1: OLDER, 2: RECORD}))


# ---------------------------------------------------------------- the formats, checked when the source is built

def test_the_defaults_and_the_value_schema_shorthand() -> None:
    plain = KafkaSource(["t"])
    assert plain.value == Bytes() and plain.key == Bytes()
    assert KafkaSource(["t"], value_schema="id STRING").value == Json("id STRING")
    assert KafkaSource(["t"], value=String(), key=String()).formats == {"key": String(), "value": String()}
    refused("source.value_schema", "not both", value_schema="id STRING", value=Json("id STRING"))
    refused("source.value", "must be a format", value="json")
    refused("source.key", "must be a format", key=str)


def test_json_is_checked_as_value_schema_was() -> None:
    refused("source.value.schema", "Spark DDL", value=Json(""))
    refused("source.value.schema", r"field\(s\) offset collide", value=Json("id STRING, offset INT"))
    # a key's fields are inside its struct: they may be named like the record's columns
    assert KafkaSource(["t"], key=Json("offset INT, value STRING")).key == Json("offset INT, value STRING")


def test_avro_schemas_are_parsed_when_the_source_is_built(tmp_path: Path) -> None:
    refused("source.value.reader_schema", "not a valid Avro schema", value=Avro("{not json", {1: RECORD}))
    refused("source.value.reader_schema", "not a valid Avro schema",
            value=Avro(json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}),
                       {1: RECORD}))
    refused("source.value.reader_schema", "must be an Avro record", value=Avro('"string"', {1: '"string"'}))
    refused("source.value.reader_schema", r"field\(s\) partition collide",
            value=Avro(json.dumps({"type": "record", "name": "R", "fields": [{"name": "partition", "type": "int"}]}),
                       {1: RECORD}))
    refused("source.key.reader_schema", "eosbatch.s own", key=Avro(json.dumps(
        {"type": "record", "name": "R", "fields": [{"name": "_eosbatch_decoded", "type": "int"}]}), {1: RECORD}))
    refused("source.value.writer_schemas", "required", value=Avro(RECORD))
    refused("source.key.writer_schemas[3]", "not a valid Avro schema", key=Avro(RECORD, {1: RECORD, 3: "{}"}))
    refused("source.value.writer_schemas", "schema ids must be ints", value=Avro(RECORD, {"1": RECORD}))
    refused("source.value.writer_schemas", "schema ids must be ints", value=Avro(RECORD, {-1: RECORD}))
    refused("source.value.writer_schemas", "must be a map", value=Avro(RECORD, [RECORD]))
    refused("source.value.reader_schema", "cannot read", value=Avro(tmp_path / "missing.avsc", {1: RECORD}))


def test_avro_reads_schema_files_and_takes_any_writer_schemas_source(tmp_path: Path) -> None:
    (tmp_path / "reader.avsc").write_text(RECORD)
    (tmp_path / "v1.avsc").write_text(OLDER)
    source = KafkaSource(["t"], value=Avro(tmp_path / "reader.avsc", {1: tmp_path / "v1.avsc", 2: RECORD}),
                         key=Avro('"string"', Source({})))
    assert isinstance(source.value, Avro) and source.value.reader_schema == RECORD
    assert source.value.schema_source == MappedSchemas({1: OLDER, 2: RECORD})
    assert source.value.schema_source.schema(1) == OLDER  # type: ignore[union-attr]
    assert isinstance(source.key.schema_source, Source)  # a registry, say: asked at process time
    assert Json("a INT").schema_source is None and String().schema_source is None and Bytes().schema_source is None
