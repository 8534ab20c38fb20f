"""Avro's process step beside JSON's, on the same records.

    python -m bench.avro [--records 300000] [--partitions 4] [--rounds 3]

Writes N orders (~200 B as JSON; 1 in 10 repeats an earlier order id) twice, into two fresh topics: as JSON
objects, and as Avro in the Confluent wire format (schema id 1, the same fields), with one idempotent producer,
same keys, same partitions. Then, in rounds that alternate the two (after one warm-up round of each, not
reported), plans one batch of all N records and times its process step (read, parse, transform, stage into
PostgreSQL) on the stack's Spark Connect server; the batch is aborted after. Avro's step includes its extra
aggregate over the 5-byte headers (the batch's schema ids). Prints records/s, best and median per format, and
the CPU time of the Spark Connect server's process tree (what the step cost, however busy the machine was).

Uses EOSBATCH_DATABASE_URL / EOSBATCH_KAFKA_BOOTSTRAP / EOSBATCH_SPARK_REMOTE when set, else brings up the embedded
stack (EOSBATCH_HOME and the EOSBATCH_*_PORT variables choose which one).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import time
import uuid
from typing import Any

import fastavro
from confluent_kafka import Producer

from bench import cpu
from bench.pipelines import ORDER_SCHEMA, latest
from eosbatch import KafkaSource, Pipeline, PostgresSink, config, registry, stack, steps
from eosbatch.context import Context, quiet
from eosbatch.formats import Avro, wire
from eosbatch.ledger import migrate, sinks, store
from examples.orders.generate import ensure_topics

ORDER_AVRO = {"type": "record", "name": "Order", "namespace": "bench",
              "fields": [{"name": "order_id", "type": "string"}, {"name": "customer_id", "type": "string"},
                         {"name": "amount", "type": "double"}, {"name": "status", "type": ["null", "string"]},
                         {"name": "note", "type": ["null", "string"]}]}
RECORD_BYTES = 200


def orders(n: int) -> list[dict[str, Any]]:
    rng = random.Random(5)
    padding = RECORD_BYTES - len(json.dumps({"order_id": "o-500000", "customer_id": "c-100", "amount": 250.5,
                                             "status": "paid", "note": ""}))
    return [{"order_id": f"o-{rng.randrange(i) + 1 if i and rng.random() < 0.1 else i + 1}",
             "customer_id": f"c-{rng.randrange(200)}", "amount": round(rng.uniform(1, 500), 2),
             "status": rng.choice(("new", "paid", "shipped")), "note": "x" * padding} for i in range(n)]


def produce(bootstrap: str, topics: dict[str, str], records: list[dict[str, Any]], partitions: int) -> None:
    """Each order into both topics, as JSON and as Avro (wire format), same key, same partition."""
    parsed = fastavro.parse_schema(ORDER_AVRO)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "queue.buffering.max.messages": 1_000_000})
    for i, order in enumerate(records):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, order)
        for kind, value in (("json", json.dumps(order).encode()), ("avro", wire.framed(1, out.getvalue()))):
            while True:
                try:
                    producer.produce(topics[kind], key=order["order_id"].encode(), value=value,
                                     partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("the input was not all delivered")


def pipeline(kind: str, name: str, topic: str, records: int) -> Pipeline:
    value: dict[str, Any] = ({"value_schema": ORDER_SCHEMA} if kind == "json" else
                             {"value": Avro(json.dumps(ORDER_AVRO), {1: json.dumps(ORDER_AVRO)})})
    return Pipeline(name=name, transform=latest, sink=PostgresSink(table=name, key=["order_id"]),
                    source=KafkaSource(topics=[topic], max_records_per_batch=records, **value))


def _servers() -> dict[str, int | None]:
    found = stack.status()
    return {"spark connect": found.spark_connect_pid, "kafka": found.kafka_pid, "postgres": found.postgres_pid}


def process_once(settings: config.Settings, kind: str, topic: str, records: int) -> tuple[float, cpu.Usage]:
    """Seconds of the process step of one batch of all `records` of `topic`, by a fresh pipeline, and the CPU
    time the stack's servers spent meanwhile (the Connect server's tree: its executors and Python workers)."""
    name = f"bench_{kind}_{uuid.uuid4().hex[:8]}"
    defined = pipeline(kind, name, topic, records)
    registry.register(defined)
    ctx = Context(settings, defined, quiet)
    batch = steps.plan(ctx)
    if batch is None or sum(r.end - r.start for r in batch.ranges) != records:
        raise RuntimeError(f"{name}: expected one batch of all {records} records, got {batch}")
    roots = _servers()
    before = cpu.sample(roots)
    started = time.perf_counter()
    steps.process(ctx, batch.id)
    seconds = time.perf_counter() - started
    used = cpu.usage(before, cpu.sample(roots))
    with store.transaction(settings) as cur:
        done = store.get_batch(cur, batch.id)
    if done.state != "staged" or done.records_read != records or done.dead_letters:
        raise RuntimeError(f"{name}: batch {batch.id} is {done.state}, read {done.records_read}, "
                           f"{done.dead_letters} dead letters")
    steps.abort(ctx, batch.id, reason="bench")
    with store.transaction(settings) as cur:
        cur.execute(f"DROP TABLE IF EXISTS {sinks.sink_table(defined).as_string(cur)}, "  # noqa: S608
                    f"{sinks.stage_table(defined).as_string(cur)}")
    return seconds, used


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.avro", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if not (os.environ.get(config.DATABASE_URL) and os.environ.get(config.KAFKA_BOOTSTRAP)):
        os.environ.update(stack.up().env())
    settings = config.load()
    migrate.upgrade(settings.database_url)
    suffix = uuid.uuid4().hex[:8]
    topics = {"json": f"bench_json_{suffix}", "avro": f"bench_avro_{suffix}"}
    ensure_topics(settings, {t: args.partitions for t in topics.values()})
    started = time.perf_counter()
    produce(settings.kafka_bootstrap, topics, orders(args.records), args.partitions)
    print(f"input: {args.records:,} orders into {topics['json']} (JSON) and {topics['avro']} (Avro, wire format) "
          f"in {time.perf_counter() - started:.1f} s", flush=True)
    for kind in topics:  # warm-up: the server's JIT compiles both paths
        process_once(settings, kind, topics[kind], args.records)
    seconds: dict[str, list[float]] = {"json": [], "avro": []}
    engine: dict[str, list[float]] = {"json": [], "avro": []}  # the Connect server's CPU seconds
    for _ in range(args.rounds):
        for kind in topics:
            took, used = process_once(settings, kind, topics[kind], args.records)
            seconds[kind].append(took)
            engine[kind].append(used.parts["spark connect"])
            print(f"  {kind}: {took:.2f} s, Spark Connect server CPU {engine[kind][-1]:.2f} s, "
                  f"machine CPU {used.machine:.2f} s", flush=True)
    print(f"\nprocess step, one batch of {args.records:,} records, {args.partitions} partitions "
          f"({args.rounds} rounds after a warm-up; {cpu.cores()} cores):")
    print("| format | best s | median s | records/s (best) | records/s (median) | server CPU s (median) |\n"
          "|---|---|---|---|---|---|")
    for kind, found in seconds.items():
        best, median = min(found), statistics.median(found)
        print(f"| {kind} | {best:.2f} | {median:.2f} | {args.records / best:,.0f} | {args.records / median:,.0f} "
              f"| {statistics.median(engine[kind]):.2f} |")


if __name__ == "__main__":
    main()
