"""Avro values whose writer schemas come from a real schema registry (the embedded Apicurio Registry, through
its Confluent API): the records, written by fastavro in the Confluent wire format with the ids the registry gave
their schemas (an older compatible one among them), an id it does not know and a malformed record, go through
plan, process, commit and publish, and end in the independent count. An unreachable registry fails the process
as a transient error, with nothing kept and nothing dead-lettered; the retry with the registry up decodes. Once
committed, the batch decodes from the schemas it kept: verify's recompute needs no registry."""

from __future__ import annotations

import io
import json
import socket
from typing import Any

import fastavro
import pytest
from confluent_kafka import Producer
from psycopg2 import sql

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink, registry, steps
from eosbatch.exceptions import TransientError
from eosbatch.formats import Avro, String, wire
from eosbatch.formats.registry import SchemaRegistry
from eosbatch.kafka.read_back import read_topic
from eosbatch.ledger import schema_sets, store
from eosbatch.verify import audit, check_output
from examples.orders import generate
from tests.integration.conftest import Registry
from tests.integration.test_formats import V1, V2  # the same two schema versions
from tests.scenario import context

pytestmark = [pytest.mark.integration, pytest.mark.spark]

UNKNOWN_ID = 2_000_000_000  # never given out by the test's registry


def _register(url: str, subject: str, schema: dict[str, Any]) -> int:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    return int(SchemaRegistryClient({"url": url}).register_schema(subject, Schema(json.dumps(schema), "AVRO")))


def _avro(schema: dict[str, Any], record: dict[str, Any], schema_id: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return wire.framed(schema_id, out.getvalue())


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pipeline(unique: str, schemas: SchemaRegistry) -> Pipeline:
    return Pipeline(name=f"formats_registry_{unique}", transform=lambda df: df.select("id", "visits", "email"),
                    source=KafkaSource(topics=[f"formats_registry_in_{unique}"], key=String(),
                                       value=Avro(reader_schema=json.dumps(V2), writer_schemas=schemas)),
                    sink=PostgresSink(table=f"formats_registry_{unique}", key=["id"]),
                    output=KafkaOutput(topic=f"formats_registry_out_{unique}", key="id"))


def test_avro_with_a_registrys_writer_schemas_ends_exactly_once(settings, schema_registry: Registry,
                                                                unique: str) -> None:
    subject = f"customers-{unique}-value"
    v1, v2 = _register(schema_registry.url, subject, V1), _register(schema_registry.url, subject, V2)
    written: list[tuple[bytes, bytes, str | None]] = [
        (f"c{i}".encode(), _avro(V2, {"id": f"c{i}", "visits": i, "email": f"c{i}@x"}, v2), None) for i in range(6)]
    written += [(f"o{i}".encode(), _avro(V1, {"id": f"o{i}", "visits": 100 + i}, v1), None) for i in range(3)]
    written += [(b"u1", _avro(V2, {"id": "u1", "visits": 1, "email": None}, UNKNOWN_ID),
                 f"value: unknown Avro schema id {UNKNOWN_ID} (not found in the schema registry at "),
                (b"m1", wire.header(v2) + b"\x02\xff\xff\xff\xff\xff\xff",
                 f"value: not decodable as Avro written with schema id {v2}")]
    topic, out, name = f"formats_registry_in_{unique}", f"formats_registry_out_{unique}", f"formats_registry_{unique}"
    generate.ensure_topics(settings, {topic: 2, out: 2})
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, "enable.idempotence": True})
    for i, (key, value, _) in enumerate(written):
        producer.produce(topic, key=key, value=value, partition=i % 2)
    assert producer.flush(30) == 0

    # The registry cannot be reached: the process fails as a transient error, keeps no schema and dead-letters
    # nothing; the batch stays planned for its retry.
    registry.register(_pipeline(unique, SchemaRegistry(f"http://127.0.0.1:{_closed_port()}", {"max.retries": 0})))
    batch = steps.plan(context(name))
    assert batch is not None and sum(r.end - r.start for r in batch.ranges) == len(written)
    with pytest.raises(TransientError, match="cannot reach the registry"):
        steps.process(context(name), batch.id)
    with store.transaction(settings) as cur:
        kept = store.get_batch(cur, batch.id)
        assert kept.state == "planned" and schema_sets.KEY not in (kept.writers or {})
        cur.execute("SELECT count(*) FROM eosbatch.dead_letters WHERE pipeline = %s", (name,))
        assert cur.fetchone()[0] == 0

    # The retry reaches it.
    registry.register(_pipeline(unique, SchemaRegistry(schema_registry.url)))
    for step in (steps.process, steps.commit, steps.publish):
        step(context(name), batch.id)

    records = read_topic(settings, topic)
    with store.transaction(settings) as cur:
        cur.execute(sql.SQL("SELECT id, visits, email FROM {}").format(sql.Identifier("public", name)))
        rows = {r[0]: r[1:] for r in cur.fetchall()}
        cur.execute("SELECT key, error FROM eosbatch.dead_letters WHERE pipeline = %s", (name,))
        dead = {bytes(k): e for k, e in cur.fetchall()}
        kept_set = store.get_batch(cur, batch.id).writers[schema_sets.KEY]  # type: ignore[index]
    registered = SchemaRegistry(schema_registry.url)
    assert kept_set == {"value": {str(v1): registered.schema(v1), str(v2): registered.schema(v2),
                                  str(UNKNOWN_ID): None}}
    assert rows == {**{f"c{i}": (i, f"c{i}@x") for i in range(6)}, **{f"o{i}": (100 + i, None) for i in range(3)}}
    assert dead.keys() == {k for k, _, reason in written if reason} and all(
        dead[k].startswith(reason) for k, _, reason in written if reason), dead
    assert len(rows) + len(dead) == len(records) == len(written)
    output = read_topic(settings, out)
    assert sorted(json.loads(r.value or b"null")["id"] for r in output) == sorted(rows)
    assert check_output(settings, name, out, output).ok

    # verify recomputes from the schemas the batch kept: it needs no registry (nor one that lost its schemas).
    registry.register(_pipeline(unique, SchemaRegistry(f"http://127.0.0.1:{_closed_port()}", {"max.retries": 0})))
    report = audit(context(name), recompute=True)
    checked = {f.check: f.ok for f in report.findings}
    assert all(ok is not False for ok in checked.values()), report.findings
    assert checked["sink = transform(committed input)"] and checked["dead letters = malformed committed input"]

