"""Output records with a composite key, a header copied from the input record and an Avro value in the Confluent
wire format (docs/output.md), on the real stack: early publish and the outbox render the same bytes; decimals,
timestamps, dates and bytes survive the round trip; a pipeline run ends with the independent count (input vs
sink vs the read_committed output decoded with fastavro vs dead letters)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import fastavro
import psycopg2.extensions
import pytest
from psycopg2 import sql

from eosbatch import AvroValue, KafkaOutput, KafkaSource, Pipeline, PostgresSink, config
from eosbatch.context import Context
from eosbatch.kafka import record
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import lanes, sinks, store
from eosbatch.ledger.exceptions import SinkError
from eosbatch.ledger.sinks import rendering
from eosbatch.steps.publishing import record_shape
from eosbatch.verify import audit, check_output
from examples.orders import generate
from tests.pipelines.outputs import SCHEMA, SCHEMA_ID, make
from tests.scenario import ROOT

pytestmark = [pytest.mark.integration]

KATHMANDU = timezone(timedelta(hours=5, minutes=45))
COLUMNS = {"region": "text", "id": "text", "amount": "numeric(12,2)", "at": "timestamptz", "at_local": "timestamp",
           "day": "date", "raw": "bytea", "n": "bigint", "trace_id": "text", "partition": "integer",
           "offset": "bigint"}


def _pipeline(unique: str) -> Pipeline:
    return Pipeline(name=f"outfmt_{unique}", source=KafkaSource(topics=[f"outfmt_in_{unique}"]),
                    transform=lambda df: df, sink=PostgresSink(table=f"outfmt_{unique}", key=["region", "id"]),
                    output=KafkaOutput(topic=f"outfmt_out_{unique}", key=["region", "id"],
                                       value=AvroValue(schema=json.dumps(SCHEMA), schema_id=SCHEMA_ID),
                                       headers={"trace-id": "trace_id"}))


def _decode(value: bytes) -> dict:
    """The independent decoder: the 5-byte header, then fastavro with the schema as the test wrote it."""
    assert value[:5] == b"\x00" + SCHEMA_ID.to_bytes(4, "big"), value[:5]
    return fastavro.schemaless_reader(io.BytesIO(value[5:]), fastavro.parse_schema(SCHEMA))  # type: ignore[return-value]


ROWS = [  # region, id, amount, at, at_local, day, raw, n, trace_id, partition, offset
    ("eu", "1", Decimal("-9999999999.99"), datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=KATHMANDU),
     datetime(1969, 12, 31, 23, 59, 59, 999999), date(1, 1, 1), b"\x00\xff\\\"", -2**63, "t-1", 0, 10),
    ("eu", "2", Decimal("0.01"), datetime(1970, 1, 1, tzinfo=UTC), datetime(2024, 1, 1), date(9999, 12, 31), b"",
     2**63 - 1, None, 1, 11),
    ("us", "1", None, None, None, None, None, None, "é€😀", 2, 12),
]


def test_early_publish_and_the_outbox_produce_the_same_records_and_values_round_trip(settings, unique) -> None:
    pipeline = _pipeline(unique)
    sink = sinks.sink_table(pipeline)
    staged = [sinks.Column(n, t) for n, t in COLUMNS.items()]
    names = list(COLUMNS)
    connection = store.connect(settings)
    try:
        with connection.cursor() as cur, connection.cursor() as reads:
            psycopg2.extensions.register_type(psycopg2.extensions.BYTES, reads)  # as publish reads (ledger.stream)
            cur.execute("SET TimeZone = 'Asia/Kathmandu'")
            cur.execute(sql.SQL("CREATE TABLE {} (region text NOT NULL, id text NOT NULL, amount numeric(12,2), "
                                "at timestamptz, at_local timestamp, day date, raw bytea, n bigint, trace_id text, "
                                "partition integer, \"offset\" bigint, PRIMARY KEY (region, id))").format(sink))
            sinks.ensure_tables(cur, pipeline, staged)
            lanes.lock_pipeline(cur, pipeline.name)
            batch = store.create_batch(cur, pipeline.name, "regular", 0, [], "g")
            for row in ROWS:
                cur.execute(sql.SQL("INSERT INTO {} ({}, {}, {}) VALUES (%s, 'w:1', {})").format(
                    sinks.stage_table(pipeline), sql.Identifier(sinks.BATCH_COLUMN),
                    sql.Identifier(sinks.WRITER_COLUMN), sql.SQL(", ").join(map(sql.Identifier, names)),
                    sql.SQL(", ").join(sql.Placeholder() * len(names))), (batch.id, *row))
            batch = batch._replace(writers={"sink": {"w:1": len(ROWS)}, "columns": names})
            query, why_not = sinks.early_outbox_query(cur, pipeline, batch)
            assert query is not None, why_not
            reads.execute(query, {"batch": batch.id, "writers": ["w:1"]})
            early = reads.fetchall()
            moved = sinks.move_to_sink(cur, pipeline, batch, with_outbox=True, max_record_bytes=1_000_000)
            reads.execute(sinks.outbox_query(pipeline, names), (batch.id,))
            outbox = reads.fetchall()
            cur.execute(sql.SQL("SELECT {}, {} FROM {} r").format(
                rendering.key(pipeline.output, "r"), rendering.record_size(pipeline.output), sink))
            bounds = dict(cur.fetchall())  # the size the commit checks against the topic's limit, by key
    finally:
        connection.rollback()
        connection.close()
    assert moved.outbox == len(early) == len(outbox) == len(ROWS)
    common = record.batch_headers(pipeline.name, 1, 1)

    def records(rows: list[tuple]) -> list[tuple]:
        made = record.outgoing(iter([rows]), pipeline.source.topics, common, *record_shape(pipeline))
        return sorted((key, value, [h for h in headers if h[0] != record.SEQ]) for key, value, headers in made)

    assert records(early) == records(outbox)  # byte for byte: key, value and headers
    by_key = {key: (value, dict(headers)) for key, value, headers in records(outbox)}
    for region, id_, amount, at, at_local, day, raw, n, trace, _partition, offset in ROWS:
        key = json.dumps({"region": region, "id": id_}, separators=(",", ":"))
        value, headers = by_key[key.encode()]  # the key's exact bytes: the JSON object of its columns, in order
        assert _decode(value) == {"region": region, "id": id_, "amount": amount, "at": at, "at_local": at_local,
                                  "day": day, "raw": raw, "n": n, "trace_id": trace}
        assert headers.get("trace-id") == (None if trace is None else trace.encode())
        assert headers[record.SOURCE_OFFSET] == str(offset).encode()
        copied = len("trace-id") + len(headers["trace-id"]) if trace is not None else 0
        assert bounds[key] >= len(key.encode()) + len(value) + copied  # the Avro size bound is one


def test_a_schema_the_sink_cannot_fill_is_refused_before_anything_commits(settings, unique) -> None:
    pipeline = _pipeline(unique)
    staged = [sinks.Column(n, t) for n, t in COLUMNS.items() if n != "raw"]
    connection = store.connect(settings)
    try:
        with connection.cursor() as cur:
            with pytest.raises(SinkError, match=r"output.value.schema: field raw: the sink has no column raw"):
                sinks.ensure_tables(cur, pipeline, staged)
    finally:
        connection.rollback()
        connection.close()
    with pytest.raises(SinkError, match=r"output.headers\['trace-id'\]: column trace_id is bigint"):
        sinks.validate_columns(pipeline, [sinks.Column(n, "bigint" if n == "trace_id" else t)
                                          for n, t in COLUMNS.items()])


# ---------------------------------------------------------------- a pipeline run (tests/pipelines/outputs.py)

def _order(region: str, id_: str, i: int, trace: str | None) -> tuple[dict, bytes]:
    """An input record's fields (as the sink should store them) and its JSON text (the amount a bare number)."""
    fields = {"region": region, "id": id_, "amount": Decimal(f"{i}.{i % 100:02d}") * (-1 if i % 2 else 1),
              "at": datetime(2024, 2, 29, 12, 0, 0, i, tzinfo=KATHMANDU) + timedelta(days=i),
              "at_local": datetime(2023, 12, 31, 23, 59, 59, 999999 - i), "day": date(2000, 1, 1) + timedelta(days=i),
              "raw": bytes([i % 256, 0, 255, 92]), "n": -(2**62) + i, "trace_id": trace}
    text = json.dumps({"region": region, "id": id_, "at": fields["at"].isoformat(),
                       "at_local": fields["at_local"].isoformat(), "day": fields["day"].isoformat(),
                       "raw_hex": fields["raw"].hex(), "n": fields["n"], "mirror_trace": trace})
    return fields, (text[:-1] + f', "amount": {fields["amount"]}}}').encode()


def _produce(settings, topic: str, records: list[tuple[bytes, bytes, list]]) -> None:
    producer = __import__("confluent_kafka").Producer(settings.kafka(**{"partitioner": "murmur2_random"}))
    for key, value, headers in records:
        producer.produce(topic, value=value, key=key, headers=headers)
    assert producer.flush(30) == 0


@pytest.mark.spark
def test_a_run_publishes_avro_with_a_composite_key_and_copied_headers_exactly_once(settings, unique) -> None:
    name, topic_in, topic_out = f"outputs_{unique}", f"outputs_in_{unique}", f"outputs_out_{unique}"
    generate.ensure_topics(settings, {topic_in: 3, topic_out: 2})
    expected: dict[tuple[str, str], dict] = {}
    malformed = 0

    def wave(orders: list[tuple[str, str, int, str | None]], bad: list[bytes]) -> None:
        nonlocal malformed
        records = []
        for region, id_, i, trace in orders:
            fields, text = _order(region, id_, i, trace)
            expected[(region, id_)] = fields  # one key, one partition (keyed): the last one produced wins
            records.append((f"{region}|{id_}".encode(), text, [("trace-id", trace.encode())] if trace else []))
        records += [(b"bad", b, []) for b in bad]
        malformed += len(bad)
        _produce(settings, topic_in, records)

    def run(early: str) -> None:
        env = {**os.environ, "EOSBATCH_PIPELINES": "tests.pipelines.outputs", "EOSBATCH_TEST_SUFFIX": unique,
               "PYTHONPATH": str(ROOT), config.EARLY_PUBLISH: early}
        done = subprocess.run([sys.executable, "-m", "eosbatch.cli", "run", name], env=env, capture_output=True,
                              text=True, timeout=600, cwd=ROOT)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    wave([(r, str(i), i, f"trace-{i}" if i % 3 else None) for i in range(30) for r in ("eu", "us")],
         [b"not json", b'{"region": "eu"}'])
    # updates, later in the same partitions: the latest row wins. One run (one batch), published from the outbox
    # after the commit; early publish renders the same bytes (above; and tests/chaos/test_chaos.py's Avro case).
    wave([("eu", str(i), 100 + i, f"again-{i}" if i % 2 else None) for i in range(0, 30, 4)], [b"[1, 2]"])
    run("0")

    # the sink: the latest row of every key, typed as the input said
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("SELECT region, id, amount, at, at_local, day, raw, n, trace_id FROM {}").format(
            sql.Identifier("public", name)))
        stored = {(r[0], r[1]): dict(zip(("region", "id", "amount", "at", "at_local", "day", "raw", "n", "trace_id"),
                                         (*r[:6], bytes(r[6]), *r[7:]), strict=True)) for r in cur.fetchall()}
        cur.execute("SELECT count(*) FROM eosbatch.dead_letters WHERE pipeline = %s", (name,))
        dead = cur.fetchone()[0]
    assert stored == {k: {"region": k[0], "id": k[1], **{c: v for c, v in e.items()}} for k, e in expected.items()}
    assert dead == malformed == 3
    # the output: each published batch's records once, read_committed, decoded independently
    outputs = read_topic(settings, topic_out)
    check = check_output(settings, name, topic_out, outputs)
    assert check.ok and check.records == len(outputs) == 60, check
    last: dict[tuple[str, str], tuple[bytes, dict, dict]] = {}
    for r in sorted(outputs, key=lambda r: record.commit_order(r.headers)):
        row = _decode(r.value)
        assert r.key == json.dumps({"region": row["region"], "id": row["id"]}, separators=(",", ":")).encode()
        last[(row["region"], row["id"])] = (r.key, row, r.headers)
    assert {k: row for k, (_, row, _) in last.items()} == stored
    for _, row, headers in last.values():
        assert headers.get("trace-id") == (None if row["trace_id"] is None else row["trace_id"].encode())
    # and eosbatch's own audit agrees, the sink recomputed from the committed input on Spark
    result = audit(Context(config.load(), make(unique)), recompute=True)
    assert result.ok, result.violations
