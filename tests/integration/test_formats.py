"""Avro in the Confluent wire format, string keys and headers, on the real stack: records written by fastavro
with the 5-byte header (the reader schema's own id, an older compatible writer schema, an unknown id, a
malformed record, a bad magic byte, a key that is not UTF-8, a tombstone) go through plan, process, commit and
publish, and end in the independent count: input = sink rows + dead letters (each with its reason), and the
read_committed output holds each sink row once. The batch keeps the writer schemas it decoded with: a retried
process, after the map learnt a new id, and verify's recompute decode as the first run did. A twin pipeline reads
Avro record keys from a topic (an older key writer, an unknown id, an undecodable key) into a sink keyed by the
key's fields."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer
from psycopg2 import sql

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink, registry, steps
from eosbatch.formats import Avro, String, wire
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import schema_sets, store
from eosbatch.verify import audit, check_output
from examples.orders import generate
from tests.conftest import _unavailable
from tests.scenario import context

pytestmark = [pytest.mark.integration, pytest.mark.spark]

V1 = {"type": "record", "name": "Customer", "namespace": "shop",
      "fields": [{"name": "id", "type": "string"}, {"name": "visits", "type": "int"}]}
# v2: visits widened to long, an optional email with a default (what a reader of v1 records fills in)
V2 = {"type": "record", "name": "Customer", "namespace": "shop",
      "fields": [{"name": "id", "type": "string"}, {"name": "visits", "type": "long"},
                 {"name": "email", "type": ["null", "string"], "default": None}]}
UNKNOWN_ID = 7


def avro(schema: dict[str, Any], record: dict[str, Any], schema_id: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return wire.framed(schema_id, out.getvalue())


def inputs() -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], str | None]]:
    """(key, value, headers, the dead letter's reason or None) of every record the test writes."""
    good: list[Any] = [(f"c{i}".encode(), avro(V2, {"id": f"c{i}", "visits": i, "email": f"c{i}@x"}, 2),
                        [("trace", f"t{i}".encode())] if i % 2 else [], None) for i in range(8)]
    good += [(f"o{i}".encode() if i else None, avro(V1, {"id": f"o{i}", "visits": 100 + i}, 1),
              [("trace", b"old"), ("other", b"\x00\x01")], None) for i in range(4)]
    bad: list[Any] = [
        (b"u1", avro(V2, {"id": "u1", "visits": 1, "email": None}, UNKNOWN_ID), [],
         f"value: unknown Avro schema id {UNKNOWN_ID} "),
        (b"m1", wire.header(2) + b"\x02\xff\xff\xff\xff\xff\xff", [],
         "value: not decodable as Avro written with schema id 2"),
        (b"j1", b'{"id": "j1", "visits": 3}', [], "value: not the Confluent wire format: its first byte is 0x7B"),
        (b"s1", b"\x00\x00", [], "value: 2 bytes: too short for the Confluent wire format"),
        (b"\xff\xfe", avro(V2, {"id": "k1", "visits": 1, "email": None}, 2), [], "key: not valid UTF-8"),
        (b"c0", None, [], "value is null (a tombstone)"),
    ]
    return good + bad


def customers(df: Any) -> Any:
    from pyspark.sql import functions as F

    trace = F.try_element_at(F.filter("headers", lambda h: h["key"] == "trace"), F.lit(1))["value"]
    return df.select("id", "visits", "email", F.col("key").alias("customer_key"), trace.cast("string").alias("trace"),
                     F.size("headers").alias("header_count"), "partition", "offset")


def failing(df: Any) -> Any:
    raise RuntimeError("the first process of the batch fails after resolving its schemas")


def pipeline(unique: str, schemas: dict[int, Any], transform: Any = customers) -> Pipeline:
    return Pipeline(name=f"formats_{unique}", transform=transform,
                    source=KafkaSource(topics=[f"formats_in_{unique}"], key=String(),
                                       value=Avro(reader_schema=json.dumps(V2), writer_schemas=schemas)),
                    sink=PostgresSink(table=f"formats_{unique}", key=["id"]),
                    output=KafkaOutput(topic=f"formats_out_{unique}", key="id"))


def test_avro_string_keys_and_headers_end_exactly_once(settings, unique, tmp_path: Path) -> None:
    topic, out = f"formats_in_{unique}", f"formats_out_{unique}"
    generate.ensure_topics(settings, {topic: 2, out: 2})
    written = inputs()
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True})
    for i, (key, value, headers, _) in enumerate(written):
        producer.produce(topic, key=key, value=value, headers=headers, partition=i % 2)
    assert producer.flush(30) == 0
    v2_file = tmp_path / "customer-v2.avsc"
    v2_file.write_text(json.dumps(V2))
    name = f"formats_{unique}"

    # A first process resolves the batch's ids (1 and 2 from the map, 7 unknown), keeps them, then fails.
    registry.register(pipeline(unique, {1: json.dumps(V1), 2: v2_file}, failing))
    batch = steps.plan(context(name))
    assert batch is not None and sum(r.end - r.start for r in batch.ranges) == len(written)
    with pytest.raises(Exception, match="the first process of the batch fails"):
        steps.process(context(name), batch.id)
    expected_set = {"value": {"1": json.dumps(V1), "2": json.dumps(V2), str(UNKNOWN_ID): None}}
    with store.transaction(settings) as cur:
        kept = store.get_batch(cur, batch.id)
        assert kept.state == "planned" and (kept.writers or {}).get(schema_sets.KEY) == expected_set

    # The map learns id 7 meanwhile; the retried process still decodes as the first did: 7 is unknown.
    registry.register(pipeline(unique, {1: json.dumps(V1), 2: v2_file, UNKNOWN_ID: json.dumps(V2)}))
    steps.process(context(name), batch.id)
    steps.commit(context(name), batch.id)
    steps.publish(context(name), batch.id)

    # The independent count, from the input topic.
    records = read_topic(settings, topic)
    assert len(records) == len(written)
    sink = sql.Identifier("public", f"formats_{unique}")
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("SELECT id, visits, email, customer_key, trace, header_count FROM {}").format(sink))
        rows = {r[0]: r[1:] for r in cur.fetchall()}
        cur.execute('SELECT key, value, error FROM eosbatch.dead_letters WHERE pipeline = %s', (name,))
        dead = cur.fetchall()
        assert store.get_batch(cur, batch.id).writers[schema_sets.KEY] == expected_set  # type: ignore[index]
        assert schema_sets.used_schemas(cur, name) == {"value": {1: json.dumps(V1), 2: json.dumps(V2)}}
    expected_rows = {f"c{i}": (i, f"c{i}@x", f"c{i}", f"t{i}" if i % 2 else None, 1 if i % 2 else None)
                     for i in range(8)}
    expected_rows |= {f"o{i}": (100 + i, None, f"o{i}" if i else None, "old", 2) for i in range(4)}
    assert rows == expected_rows
    assert len(rows) + len(dead) == len(records) == len(written)
    # each dead letter keeps its key and value as the bytes they were, and its reason
    got = {(bytes(k) if k is not None else None, bytes(v) if v is not None else None): e for k, v, e in dead}
    wanted = {(k, v): reason for k, v, _, reason in written if reason is not None}
    assert got.keys() == wanted.keys()
    for pair, error in got.items():
        assert error.startswith(wanted[pair]), (error, wanted[pair])
    output = read_topic(settings, out)
    assert sorted(json.loads(r.value)["id"] for r in output) == sorted(rows)
    assert check_output(settings, name, out, output).ok

    # verify recomputes the sink and the dead letters from the input with the writer schemas the batch kept
    # (the pipeline's map knows id 7 now: decoding with it would turn a dead letter into a row).
    report = audit(context(name), recompute=True)
    assert all(f.ok is not False for f in report.findings), report.findings
    checked = {f.check: f.ok for f in report.findings}
    assert checked["sink = transform(committed input)"] and checked["dead letters = malformed committed input"]


def test_each_format_parses_its_role_or_names_the_reason(settings) -> None:
    """The reader on records made in Spark (no topic): JSON and Avro keys, String and Bytes values, a JSON value
    whose parse keeps the columns it always had, and the dead letters' key and value as the bytes they were."""
    if not settings.spark_remote:
        _unavailable("needs the stack's Spark Connect server (EOSBATCH_SPARK_REMOTE)")
    from eosbatch.engine import connect
    from eosbatch.formats import Bytes, Json
    from eosbatch.spark import reader
    from eosbatch.spark.kafka_columns import KAFKA_COLUMNS

    spark = connect.session(settings)

    def parsed(source: KafkaSource, pairs: list[tuple[bytes | None, bytes | None]], schemas: Any = None) -> Any:
        rows = [(k, v, "t", 0, i, None, 0, None) for i, (k, v) in enumerate(pairs)]
        return reader.parse(spark.createDataFrame(rows, reader.struct(KAFKA_COLUMNS)), source, schemas)

    json_key = KafkaSource(["t"], key=Json("id INT NOT NULL, region STRING"), value=String())
    found = parsed(json_key, [(b'{"id": 1, "region": "eu"}', b"hello"), (b'{"region": "eu"}', b"x"), (b"nope", b"x"),
                              (None, b"\xff"), (b'{"id": 2}', None)])
    rows = found.orderBy("offset").collect()
    assert [(r["key"] and r["key"].asDict(), r["value"], r["_eosbatch_error"]) for r in rows] == [
        ({"id": 1, "region": "eu"}, "hello", None),
        ({"id": None, "region": "eu"}, "x", "key: missing required field 'id'"),
        ({"id": None, "region": None}, "x", "key: not a JSON object matching schema (id INT NOT NULL, region STRING)"),
        (None, None, "value: not valid UTF-8"),
        ({"id": 2, "region": None}, None, "value is null (a tombstone): this sink does not take deletes")]
    dead = found.select(*reader.dead_letter_columns(json_key)).orderBy("offset").collect()
    assert [(r["key"], r["value"]) for r in dead][1:4] == [(b'{"region": "eu"}', b"x"), (b"nope", b"x"),
                                                           (None, b"\xff")]

    string = json.dumps("string")
    avro_key = KafkaSource(["t"], key=Avro(string, {3: string}), value=Bytes())
    text = io.BytesIO()
    fastavro.schemaless_writer(text, fastavro.parse_schema("string"), "abc")
    rows = parsed(avro_key, [(wire.framed(3, text.getvalue()), None), (wire.framed(4, text.getvalue()), b"v"),
                             (b"\x00\x00", b"v")], {"key": {3: string, 4: None}}).orderBy("offset").collect()
    assert [(r["key"], r["value"], r["_eosbatch_error"]) for r in rows] == [
        ("abc", None, None),  # a Bytes value: a null one reaches the transform
        (None, b"v", "key: unknown Avro schema id 4 (not found in the pipeline's writer_schemas map)"),
        (None, b"v", "key: 2 bytes: too short for the Confluent wire format (a magic byte 0 and a 4-byte schema id, "
                     "then Avro)")]

    # JSON values with bytes keys: the columns the parse always gave, and headers
    plain = parsed(KafkaSource(["t"], value_schema="id INT"), [(b"k", b'{"id": 5}')])
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
                             "id", "_eosbatch_error"]


# Avro record keys from a real topic: an older key writer (no region: the reader fills in its default), the
# reader's own id, an unknown id and a key that does not decode; the transform and the sink use the key's fields.
KEY_V1 = {"type": "record", "name": "CustomerKey", "namespace": "shop", "fields": [{"name": "id", "type": "string"}]}
KEY_V2 = {"type": "record", "name": "CustomerKey", "namespace": "shop",
          "fields": [{"name": "id", "type": "string"}, {"name": "region", "type": "string", "default": "eu"}]}
UNKNOWN_KEY_ID = 99


def keyed_inputs() -> list[tuple[bytes, bytes, str | None]]:
    """(key, value, the dead letter's reason or None) of every record the keyed test writes."""
    good = [(avro(KEY_V2, {"id": f"k{i // 2}", "region": ("eu", "us")[i % 2]}, 21),
             avro(V2, {"id": f"v{i}", "visits": i, "email": None}, 2), None) for i in range(6)]
    good += [(avro(KEY_V1, {"id": "old"}, 20), avro(V2, {"id": "v6", "visits": 6, "email": None}, 2), None)]
    return good + [
        (avro(KEY_V2, {"id": "u", "region": "eu"}, UNKNOWN_KEY_ID), avro(V2, {"id": "v7", "visits": 7}, 2),
         f"key: unknown Avro schema id {UNKNOWN_KEY_ID} "),
        (wire.header(21) + b"\x08ab", avro(V2, {"id": "v8", "visits": 8}, 2),
         "key: not decodable as Avro written with schema id 21"),
    ]


def by_key(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.select(F.col("key.id").alias("id"), F.col("key.region").alias("region"), "visits",
                     F.col("id").alias("value_id"))


def test_avro_record_keys_from_a_topic_end_exactly_once(settings, unique) -> None:
    topic, out, name = f"formats_kin_{unique}", f"formats_kout_{unique}", f"formats_keys_{unique}"
    generate.ensure_topics(settings, {topic: 2, out: 2})
    written = keyed_inputs()
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True})
    for i, (key, value, _) in enumerate(written):
        producer.produce(topic, key=key, value=value, partition=i % 2)
    assert producer.flush(30) == 0
    source = KafkaSource(topics=[topic], key=Avro(json.dumps(KEY_V2), {20: json.dumps(KEY_V1), 21: json.dumps(KEY_V2)}),
                         value=Avro(json.dumps(V2), {2: json.dumps(V2)}))
    registry.register(Pipeline(name=name, transform=by_key, source=source, output=KafkaOutput(topic=out, key="id"),
                               sink=PostgresSink(table=name, key=["id", "region"])))
    batch = steps.plan(context(name))
    assert batch is not None
    for step in (steps.process, steps.commit, steps.publish):
        step(context(name), batch.id)

    # The independent count, from the input topic.
    records = read_topic(settings, topic)
    assert len(records) == len(written)
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("SELECT id, region, visits, value_id FROM {}").format(sql.Identifier("public", name)))
        rows = {(r[0], r[1]): r[2:] for r in cur.fetchall()}
        cur.execute("SELECT key, value, error FROM eosbatch.dead_letters WHERE pipeline = %s", (name,))
        dead = cur.fetchall()
        assert store.get_batch(cur, batch.id).writers[schema_sets.KEY] == {  # type: ignore[index]
            "key": {"20": json.dumps(KEY_V1), "21": json.dumps(KEY_V2), str(UNKNOWN_KEY_ID): None},
            "value": {"2": json.dumps(V2)}}
    # each id in two regions: two rows; the old writer's key is read with the reader's default region
    assert rows == {(f"k{i // 2}", ("eu", "us")[i % 2]): (i, f"v{i}") for i in range(6)} | {("old", "eu"): (6, "v6")}
    assert len(rows) + len(dead) == len(records) == len(written)
    got = {bytes(k): (bytes(v), e) for k, v, e in dead}
    wanted = {k: (v, reason) for k, v, reason in written if reason is not None}
    assert got.keys() == wanted.keys()
    for key, (value, error) in got.items():
        assert value == wanted[key][0] and error.startswith(wanted[key][1]), (error, wanted[key])
    output = read_topic(settings, out)
    assert sorted(json.loads(r.value)["id"] for r in output) == sorted(k for k, _ in rows)
    assert check_output(settings, name, out, output).ok

    # verify recomputes the sink and the dead letters from the input with the schema sets the batch kept
    report = audit(context(name), recompute=True)
    assert all(f.ok is not False for f in report.findings), report.findings
    checked = {f.check: f.ok for f in report.findings}
    assert checked["sink = transform(committed input)"] and checked["dead letters = malformed committed input"]
