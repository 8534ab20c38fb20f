"""This machine's ceilings, measured on the same stack as the batch: a PostgreSQL COPY of N rows shaped like
the pipeline's (into staging's shape, then the sink's) and a plain produce of N records like the publisher's."""

from __future__ import annotations

import io
import json
import random
import time
from collections.abc import Iterator
from typing import Any

import psycopg2
from confluent_kafka import Producer
from psycopg2 import sql

from bench.harness import Timing
from eosbatch.config import Settings
from eosbatch.kafka import record
from examples.orders.generate import ensure_topics


def _orders(n: int, partitions: int, padding: int) -> Iterator[dict[str, Any]]:
    """Rows shaped like the bench pipeline's results (its sink columns, in order)."""
    rng = random.Random(11)
    for i in range(n):
        yield {"order_id": f"o-{i + 1}", "customer_id": f"c-{rng.randrange(200)}",
               "amount": round(rng.uniform(1, 500), 2), "status": rng.choice(("new", "paid", "shipped")),
               "note": "x" * padding, "partition": i % partitions, "offset": i // partitions}


def copy_ceilings(settings: Settings, n: int, partitions: int, padding: int, prefix: str) -> list[Timing]:
    """COPY of N rows in the executors' format, into an UNLOGGED table shaped like staging (with its index),
    then into a logged table with a primary key shaped like the sink."""
    rows = io.StringIO()
    for order in _orders(n, partitions, padding):
        rows.write("1\tbench:0:0\t" + "\t".join(map(str, order.values())) + "\n")
    columns = ('order_id text, customer_id text, amount double precision, status text, note text, '
               '"partition" integer, "offset" bigint')
    tables = [("COPY into UNLOGGED table (staging shape)", f"{prefix}_copy_unlogged",
               "CREATE UNLOGGED TABLE {t} (b bigint NOT NULL, w text NOT NULL, %s); "
               "CREATE INDEX ON {t} (b, w)"),
              ("COPY into logged table with PK (sink shape)", f"{prefix}_copy_logged",
               "CREATE TABLE {t} (b bigint NOT NULL, w text NOT NULL, %s, PRIMARY KEY (order_id))")]
    timings = []
    connection = psycopg2.connect(settings.psycopg_dsn)
    try:
        for label, name, ddl in tables:
            table = sql.Identifier(name)
            with connection, connection.cursor() as cur:
                cur.execute(sql.SQL(ddl % columns).format(t=table))
            rows.seek(0)
            started = time.perf_counter()
            with connection, connection.cursor() as cur:
                cur.copy_expert(sql.SQL("COPY {} FROM STDIN").format(table).as_string(cur), rows)
            timings.append(Timing(label, n, time.perf_counter() - started))
            with connection, connection.cursor() as cur:
                cur.execute(sql.SQL("DROP TABLE {}").format(table))
    finally:
        connection.close()
    return timings


def produce_ceiling(settings: Settings, n: int, partitions: int, padding: int, topic: str) -> Timing:
    """A plain produce of N records like the publisher's (size, keys, headers, producer settings), but with no
    transaction and no idempotence, from memory."""
    records = [(o["order_id"].encode(), json.dumps(o, separators=(",", ":")).encode())
               for o in _orders(n, partitions, padding)]
    headers: Any = [(record.PIPELINE, b"bench"), (record.BATCH, b"1")]
    ensure_topics(settings, {topic: partitions})
    producer = Producer(settings.kafka(**{
        "acks": "all", "partitioner": "murmur2_random", "linger.ms": 20,
        "queue.buffering.max.messages": 200_000}))
    started = time.perf_counter()
    for count, (key, value) in enumerate(records, 1):
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if count % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("produce ceiling: records left undelivered after 60 s")
    return Timing("produce, not transactional", n, time.perf_counter() - started)
