"""The output record's pure parts (docs/output.md): KafkaOutput's validation, the key's SQL (one column's text or
a JSON object of several), the Avro value's encoding in the Confluent wire format and its fit to the sink's
columns, and the records built from publish's rows (copied headers, NULL -> no header)."""

from __future__ import annotations

import io
import json
import pickle
import struct
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import fastavro
import pytest

from eosbatch import AvroValue, JsonValue, KafkaOutput
from eosbatch.exceptions import ConfigError
from eosbatch.kafka import avro, record
from eosbatch.ledger.sinks import Column, output_fit, rendering
from eosbatch.outputs import avro_misfits
from tests.unit.test_unit_sink_sql import render

SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}]},
    {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
    {"name": "at_local", "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}]},
    {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
    {"name": "raw", "type": ["null", "bytes"]},
    {"name": "n", "type": ["null", "long"]},
    {"name": "ratio", "type": ["null", "double"]},
    {"name": "ok", "type": ["null", "boolean"]},
]}
SINK = {"order_id": "text", "amount": "numeric(12,2)", "at": "timestamp with time zone",
        "at_local": "timestamp without time zone", "day": "date", "raw": "bytea", "n": "bigint",
        "ratio": "double precision", "ok": "boolean"}


def value(schema: dict | None = None, schema_id: int = 7) -> AvroValue:
    return AvroValue(schema=json.dumps(schema or SCHEMA), schema_id=schema_id)


def test_a_single_key_stays_as_it_was_and_a_list_is_a_composite_key() -> None:
    single = KafkaOutput("out", key="id")
    assert single == KafkaOutput("out", "id") and single.key == "id" and single.key_columns == ("id",)
    assert not single.composite and single.value == JsonValue() and dict(single.headers) == {}
    composite = KafkaOutput("out", key=["region", "id"], headers={"trace-id": "trace_id"})
    assert composite.composite and composite.key_columns == ("region", "id")
    assert hash(composite) == hash(KafkaOutput("out", ["region", "id"], headers={"trace-id": "trace_id"}))
    avro_output = KafkaOutput("out", ["region", "id"], value=value(), headers={"trace-id": "trace_id"})
    assert pickle.loads(pickle.dumps(avro_output)) == avro_output  # a pipeline pickles, as before


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"key": ["a", "b c"]}, "output.key[1]"),
    ({"key": ["a", "a"]}, "output.key"),
    ({"key": []}, "output.key"),
    ({"key": "id", "value": "avro"}, "output.value"),
    ({"key": "id", "headers": {"eosbatch.batch": "b"}}, "output.headers['eosbatch.batch']"),
    ({"key": "id", "headers": {"trace": "not a column"}}, "output.headers['trace']"),
    ({"key": "id", "headers": {"trace": "_eosbatch_batch"}}, "output.headers['trace']"),
    ({"key": "id", "headers": ["trace"]}, "output.headers"),
])
def test_a_bad_output_names_its_field(kwargs, field) -> None:
    with pytest.raises(ConfigError) as raised:
        KafkaOutput("out", **kwargs)
    assert raised.value.field == field


@pytest.mark.parametrize(("schema", "schema_id", "field", "says"), [
    ("{not json", 1, "output.value.schema", "not JSON"),
    ('{"type": "string"}', 1, "output.value.schema", "record schema"),
    (json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}), 1,
     "output.value.schema", "not a valid Avro schema"),
    (json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", "int", "string"]}]}), 1,
     "output.value.schema field a", "union"),
    (json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": {"type": "array", "items": "int"}}]}),
     1, "output.value.schema field a", "not supported"),
    (json.dumps(SCHEMA), -1, "output.value.schema_id", "from 0"),
    (json.dumps(SCHEMA), True, "output.value.schema_id", "from 0"),
    (Path("/nonexistent/schema.avsc"), 1, "output.value.schema", "cannot read"),
])
def test_a_bad_avro_value_names_its_field(schema, schema_id, field, says) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        AvroValue(schema=schema, schema_id=schema_id)
    assert raised.value.field == field


def test_the_schema_may_be_a_file(tmp_path) -> None:
    path = tmp_path / "order.avsc"
    path.write_text(json.dumps(SCHEMA))
    from_file = AvroValue(schema=path, schema_id=7)
    assert [f.name for f in from_file.fields] == [f["name"] for f in SCHEMA["fields"]]
    assert from_file.header == b"\x00\x00\x00\x00\x07"


def test_the_key_is_one_column_s_text_or_the_json_object_of_several_in_their_order() -> None:
    assert render(rendering.key(KafkaOutput("out", "id"), "r")) == '"r"."id"::text'
    assert render(rendering.key(KafkaOutput("out", ["region", "id"]), "r")) == (
        'row_to_json((SELECT _eosbatch_key FROM (SELECT "r"."region", "r"."id") _eosbatch_key))::text')


def test_the_published_columns_are_the_headers_then_the_value() -> None:
    output = KafkaOutput("out", "order_id", value=value(), headers={"trace-id": "trace", "src": "origin"})
    assert render(rendering.published(output, "r")) == (
        '"r"."trace", "r"."origin", "r"."order_id", "r"."amount", "r"."at", "r"."at_local", "r"."day", "r"."raw", '
        '"r"."n", "r"."ratio", "r"."ok"')
    assert render(rendering.published(KafkaOutput("out", "k"), "r")) == 'row_to_json("r".*)::text'


def test_the_avro_size_bound_counts_each_field_at_its_widest() -> None:
    # 5 (wire header) + order_id 10 + amount 1+10+12 + at 11 + at_local 11 + day 6 + raw 1+10 + n 11 + ratio 9
    # + ok 2, and the strings' and bytes' octets
    assert render(rendering.avro_size_bound(value())) == (
        '(99 + coalesce(octet_length(r."order_id"::text), 0) + coalesce(octet_length(r."raw"::bytea), 0))')
    composite = KafkaOutput("out", ["a", "b"], headers={"h": "c"})
    fits = render(rendering.record_fits([Column("a", "bigint"), Column("b", "text"), Column("c", "text")], composite))
    assert fits.startswith("CASE WHEN ") and "row_to_json((SELECT _eosbatch_key" in fits
    assert '(11 + coalesce(octet_length(r."c"), 0))' in fits  # the header: its name, value and framing


def test_the_wire_format_round_trips_decimals_timestamps_dates_and_bytes() -> None:
    v = value()
    encode = avro.encoder(v)
    kathmandu = timezone(timedelta(hours=5, minutes=45))
    row = [b"o-1", Decimal("-12345.67"), datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=kathmandu),
           datetime(1969, 12, 31, 23, 59, 59, 999999), date(1, 1, 1), memoryview(b"\x00\xff\\"), -2**63, 0.1, True]
    data = encode(row)  # text as bytes and bytea as memoryview, as publish reads them
    assert data[:5] == b"\x00" + struct.pack(">I", 7)
    direct = io.BytesIO()
    fastavro.schemaless_writer(direct, v.parsed, {
        "order_id": "o-1", "amount": Decimal("-12345.67"), "at": row[2], "at_local": row[3], "day": date(1, 1, 1),
        "raw": b"\x00\xff\\", "n": -2**63, "ratio": 0.1, "ok": True})
    assert data[5:] == direct.getvalue()  # plain Avro binary after the 5 bytes
    back = avro.decode(v, data)
    assert back["order_id"] == "o-1" and back["amount"] == Decimal("-12345.67")
    assert back["at"] == row[2] and back["at"].tzinfo is not None
    assert back["at_local"] == row[3]  # a timestamp without time zone is not moved by the local zone
    assert back["day"] == date(1, 1, 1) and back["raw"] == b"\x00\xff\\" and back["n"] == -2**63
    assert back["ratio"] == 0.1 and back["ok"] is True
    nulls = avro.decode(v, encode([b"o-2"] + [None] * 8))
    assert nulls == {"order_id": "o-2", **{f["name"]: None for f in SCHEMA["fields"][1:]}}


def test_a_naive_timestamp_is_encoded_as_utc_whatever_the_local_zone(monkeypatch) -> None:
    import time

    schema = {"type": "record", "name": "R", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}
    v = value(schema)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        data = avro.encoder(v)([datetime(1970, 1, 1, 0, 0, 1)])
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert avro.decode(v, data)["at"] == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)


def test_a_row_the_schema_cannot_hold_is_a_terminal_error_naming_the_schema() -> None:
    from eosbatch.exceptions import TerminalError

    with pytest.raises(TerminalError, match="output.value.schema"):
        avro.encoder(value())([None] * 9)  # order_id is not nullable


def test_the_sink_must_fill_every_field_exactly() -> None:
    v = value()
    assert avro_misfits(v, SINK, ["order_id"]) == []
    problems = avro_misfits(v, {**SINK, "amount": "numeric", "n": "text", "at": "timestamp(6) with time zone"},
                            [])
    assert problems[0].startswith("field order_id is not nullable, but column order_id may hold NULL")
    assert any(p.startswith("field amount is decimal(12,2), column amount is numeric:") for p in problems)
    assert any(p.startswith("field n (long): column n is text") for p in problems)
    assert len(problems) == 3  # timestamp(6) fits micros
    missing = {k: t for k, t in SINK.items() if k != "raw"}
    assert avro_misfits(v, missing, ["order_id"]) == ["field raw: the sink has no column raw"]
    millis = value({"type": "record", "name": "R", "fields": [
        {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]}]})
    assert avro_misfits(millis, {"at": "timestamp(3) with time zone"}, []) == []
    assert "milliseconds" in avro_misfits(millis, {"at": "timestamptz"}, [])[0]
    assert avro_misfits(v, {**SINK, "amount": "numeric(10,1)"}, ["order_id"]) == []  # scaled up, exactly


def test_the_output_s_columns_are_checked_against_the_transform_s() -> None:
    output = KafkaOutput("out", ["a", "b"], headers={"trace-id": "t", "n": "n"})
    problems = output_fit.column_problems(output, [Column("a", "text"), Column("n", "bigint")])
    assert problems == ["output.key: the transform's output lacks ['b']; it has ['a', 'n']",
                        "output.headers['trace-id']: the transform's output lacks column 't'; it has ['a', 'n']",
                        "output.headers['n']: column n is bigint; a header is copied from a text or bytea column "
                        "(cast it in the transform)"]


def test_records_copy_their_headers_and_leave_out_a_null_one() -> None:
    common = record.batch_headers("p", 3, 9)
    rows = [[(b"1", b"k1", b"in", b"0", b"5", b"t-1", memoryview(b"\x01"), b'{"a":1}'),
             (b"2", b"k2", None, None, None, None, b"raw", b'{"a":2}')]]
    out = list(record.outgoing(iter(rows), ["in"], common, ("trace-id", "bin")))
    assert out[0] == (b"k1", b'{"a":1}', [*common, (record.SEQ, b"1"), (record.SOURCE_PARTITION, b"0"),
                                          (record.SOURCE_OFFSET, b"5"), (record.SOURCE_TOPIC, b"in"),
                                          ("trace-id", b"t-1"), ("bin", b"\x01")])
    assert out[1] == (b"k2", b'{"a":2}', [*common, (record.SEQ, b"2"), ("bin", b"raw")])
    plain = list(record.outgoing(iter([[(b"1", b"k", None, None, None, b"v")]]), ["in"], common))
    assert plain == [(b"k", b"v", [*common, (record.SEQ, b"1")])]
    encoded = list(record.outgoing(iter([[(b"1", b"k", None, None, None, b"x", 5)]]), ["in"], common,
                                   encode=lambda values: repr(tuple(values)).encode()))
    assert encoded == [(b"k", b"(b'x', 5)", [*common, (record.SEQ, b"1")])]


def test_verify_compares_avro_json_and_recomputed_values_alike() -> None:
    from eosbatch.verify import _same

    kathmandu = timezone(timedelta(hours=5, minutes=45))
    instant = datetime(2024, 2, 29, 12, 0, tzinfo=kathmandu)
    # the sink's timestamptz (any zone), Avro's (UTC), row_to_json's text, the recompute's naive UTC text
    assert _same(instant) == _same(instant.astimezone(UTC)) == _same("2024-02-29T12:00:00+05:45") \
        == _same("2024-02-29T06:15:00")
    assert _same(date(2000, 1, 1)) == _same("2000-01-01")  # a date stays a date
    # bytea: psycopg2's memoryview, Avro's bytes, row_to_json's \x text, the recompute's hex
    assert _same(memoryview(b"\x00\xff")) == _same(b"\x00\xff") == _same("\\x00ff") == "00ff"
    assert _same("\\xnot hex") == "\\xnot hex"


def test_check_names_the_output_value_s_problems() -> None:
    from eosbatch.preflight import output_value_check

    assert output_value_check("out", []).ok
    bad = output_value_check("out", ["output.value.schema: field raw: the sink has no column raw"])
    assert not bad.ok and "field raw" in bad.found
    assert not output_value_check("out", None).checked
