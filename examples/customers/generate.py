"""Input for the customers demo: a compacted topic of Avro records in the Confluent wire format (magic byte 0,
the 4-byte schema id, Avro binary), keyed by customer id, written with two schema versions, with updates,
deletes (tombstones: a null value) and a few records no pipeline can read (an unknown schema id, a truncated
body). Returns nothing: the check reads the topic back and applies the rules itself."""

from __future__ import annotations

import io
import json
import random
import struct
from typing import Any

from eosbatch.config import Settings
from eosbatch.kafka import clients
from examples.customers.schemas import CUSTOMER_V1, CUSTOMER_V2
from examples.orders.generate import await_markers, ensure_topics

CUSTOMER_TOPICS = {"customers": 3, "customers_latest": 3}
UNKNOWN_SCHEMA_ID = 99


def wire(schema_id: int, schema: str, record: dict[str, Any]) -> bytes:
    """One record as a Confluent serializer writes it."""
    import fastavro

    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(json.loads(schema)), record)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


def compacted(settings: Settings, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = clients.admin(settings)
    if topic in admin.list_topics(timeout=30).topics:
        return
    # replication: the broker's default (-1), as examples/orders/generate.py's ensure_topics
    done = admin.create_topics([NewTopic(topic, partitions, -1, config={"cleanup.policy": "compact"})])
    for future in done.values():
        future.result()


def generate(settings: Settings, records: int = 2_000, customers: int = 120, seed: int = 7) -> None:
    rng = random.Random(seed)
    compacted(settings, "customers", CUSTOMER_TOPICS["customers"])
    ensure_topics(settings, {"customers_latest": CUSTOMER_TOPICS["customers_latest"]})
    producer = clients.producer(settings, **{"transactional.id": f"eosbatch-demo-customers-{seed}",
                                             "linger.ms": 20, "partitioner": "murmur2_random"})
    producer.init_transactions(60)
    producer.begin_transaction()
    for n in range(1, records + 1):
        customer = f"c-{rng.randrange(customers)}"
        if n % 401 == 0:
            value: bytes | None = b"\x00" + struct.pack(">I", UNKNOWN_SCHEMA_ID) + b"\x02x"
        elif n % 557 == 0:
            value = wire(2, CUSTOMER_V2, {"customer_id": customer, "name": "cut", "tier": "gold"})[:7]
        elif rng.random() < 0.1:
            value = None  # the customer is deleted
        elif rng.random() < 0.5:
            value = wire(1, CUSTOMER_V1, {"customer_id": customer, "name": f"name-{n}", "email": None})
        else:
            value = wire(2, CUSTOMER_V2, {"customer_id": customer, "name": f"name-{n}",
                                          "email": f"{customer}@example.com", "tier": rng.choice(["gold", "basic"])})
        producer.produce("customers", key=customer.encode(), value=value)
        producer.poll(0)
    producer.commit_transaction(60)
    await_markers(settings, ["customers"])


def expected(records: list) -> tuple[dict[str, dict[str, Any]], int]:
    """The pipeline's rules in plain Python, with fastavro (not eosbatch's decoder): each customer's last state
    (a tombstone deletes it), and how many records are dead letters (an unknown id, a body that does not decode)."""
    import fastavro

    writers = {1: CUSTOMER_V1, 2: CUSTOMER_V2}
    reader = fastavro.parse_schema(json.loads(CUSTOMER_V2))
    state: dict[str, dict[str, Any]] = {}
    dead = 0
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):  # a key's records share a partition
        key = record.key.decode()
        if record.value is None:
            state.pop(key, None)
            continue
        magic, schema_id = record.value[0], struct.unpack(">I", record.value[1:5])[0]
        if magic != 0 or schema_id not in writers:
            dead += 1
            continue
        try:
            row = fastavro.schemaless_reader(io.BytesIO(record.value[5:]),
                                             fastavro.parse_schema(json.loads(writers[schema_id])), reader)
        except (EOFError, ValueError, IndexError, UnicodeDecodeError, struct.error):
            dead += 1
            continue
        state[key] = {"name": row["name"], "email": row["email"], "tier": row["tier"]}
    return state, dead
