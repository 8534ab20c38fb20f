"""Realistic input for the demo: orders produced in Kafka transactions, some of them aborted, with
repeated order ids (updates) and a few malformed records. Returns what a read_committed reader must see."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable
from decimal import Decimal
from typing import NamedTuple

from confluent_kafka import IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import NewTopic, OffsetSpec

from eosbatch.config import Settings
from eosbatch.kafka import clients, offsets


class Produced(NamedTuple):
    committed: list[dict]   # valid orders in committed transactions, with partition and offset
    malformed: int          # committed records that must land in the dead letters
    aborted: int            # records in aborted transactions: must appear nowhere


EXAMPLE_TOPICS = {"orders": 4, "customer_totals": 4, "orders_latest": 4, "customer_totals_live": 4}


def ensure_topics(settings: Settings, topics: dict[str, int]) -> None:
    """The topics that do not exist yet, with the broker's default replication factor (-1): one replica on
    the one-node stack, three on the three-node one (`stack up --kafka-brokers 3`)."""
    admin = clients.admin(settings)
    existing = admin.list_topics(timeout=30).topics
    wanted = [NewTopic(name, partitions, -1) for name, partitions in topics.items() if name not in existing]
    for future in admin.create_topics(wanted).values() if wanted else ():
        try:
            future.result()
        except KafkaException as exc:  # created meanwhile, or listed by a broker that did not know it yet
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


MALFORMED = [b"not json at all", b'{"order_id": "x-1", "customer_id": "c-1"}',
             b'{"order_id": "x-2", "customer_id": "c-2", "amount": "twelve"}', b"[1, 2, 3]"]


def generate(settings: Settings, topic: str = "orders", records: int = 10_000, partitions: int = 4,
             transaction_size: int = 500, abort_every: int = 5, malformed_every: int = 997,
             seed: int = 7, customers: int = 200, value_padding: int = 0, tombstone_every: int = 0) -> Produced:
    """Produce `records` records in transactions; every `abort_every`-th transaction is aborted. With
    `tombstone_every`, every such record is a tombstone (a null value) keyed by an earlier order id."""
    rng = random.Random(seed)
    ensure_topics(settings, {topic: partitions})
    producer = clients.producer(settings, **{"transactional.id": f"eosbatch-demo-generator-{topic}-{seed}",
                                             "linger.ms": 20, "partitioner": "murmur2_random"})
    producer.init_transactions(60)
    delivered: dict[int, tuple[int, int]] = {}
    pending: list[tuple[int, dict | None]] = []
    committed: list[dict] = []
    malformed = aborted = 0
    sequence = 0
    transaction = 0
    padding = "x" * value_padding
    while sequence < records:
        transaction += 1
        abort = abort_every > 0 and transaction % abort_every == 0
        producer.begin_transaction()
        batch: list[tuple[int, dict | None]] = []
        for _ in range(min(transaction_size, records - sequence)):
            sequence += 1
            if not abort and malformed_every and sequence % malformed_every == 0:
                value, order = MALFORMED[sequence % len(MALFORMED)], None
                key = f"bad-{sequence}".encode()
            elif tombstone_every and sequence % tombstone_every == 0:
                value, order, key = None, None, f"o-{rng.randrange(1, sequence + 1)}".encode()
            else:
                # 1 in 10 orders repeats an earlier order id: an update that a replace sink must keep last.
                order_no = rng.randrange(1, sequence + 1) if rng.random() < 0.1 else sequence
                order = {"order_id": f"o-{order_no}",
                         "customer_id": f"{'ghost' if abort else 'c'}-{rng.randrange(customers)}",
                         "amount": round(rng.uniform(1, 500), 2),
                         "status": rng.choice(["new", "paid", "shipped"])}
                if padding:
                    order["note"] = padding
                value, key = json.dumps(order).encode(), f"o-{order_no}".encode()
            index = len(pending) + len(batch)

            def on_delivery(err, msg, index=index):  # noqa: ANN001
                if err is None:
                    delivered[index] = (msg.partition(), msg.offset())

            producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
            batch.append((index, order))
            producer.poll(0)
        producer.flush(60)
        if abort:
            producer.abort_transaction(60)
            aborted += len(batch)
        else:
            producer.commit_transaction(60)
            for index, order in batch:
                if order is None:
                    malformed += 1
                else:
                    partition, offset = delivered[index]
                    committed.append({**order, "partition": partition, "offset": offset})
        pending.extend(batch)
    producer.flush(60)
    await_markers(settings, [topic])
    return Produced(committed, malformed, aborted)


# What a partition answers while its leader is still being elected or moved: ask again.
LEADER_MOVING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART)


def await_markers(settings: Settings, topics: Iterable[str], timeout: float = 60) -> None:
    """Wait until no partition of `topics` waits on a transaction marker: the last stable offset (what a
    read_committed reader sees) has reached the high watermark.

    commit_transaction() returns once the coordinator has decided; the partitions' markers are written after
    that, so a plan or a read_committed reader started at once may still stop before the last transaction.
    Only for topics with no transaction left open (a test's or the demo's own)."""
    client = offsets.admin(settings)
    tps = offsets.partitions(client, topics)
    deadline = time.monotonic() + timeout
    while True:
        try:
            stable = _ends(client, tps, IsolationLevel.READ_COMMITTED)
            high = _ends(client, tps, IsolationLevel.READ_UNCOMMITTED)
        except KafkaException as exc:  # a partition's leader still moving (a new topic, a broker just back)
            error = exc.args[0]
            if not (error.retriable() or error.code() in LEADER_MOVING) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        behind = [tp for tp in tps if stable[tp] < high[tp]]
        if not behind:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no transaction marker after {timeout:.0f}s in {sorted(behind)}")
        time.sleep(0.05)


def _ends(client, tps, level: IsolationLevel) -> dict:  # noqa: ANN001
    futures = client.list_offsets({KafkaTP(tp.topic, tp.partition): OffsetSpec.latest() for tp in tps},
                                  isolation_level=level, request_timeout=30)
    return {tp: futures[KafkaTP(tp.topic, tp.partition)].result().offset for tp in tps}


def expected_totals(orders: list[dict]) -> dict[str, tuple[Decimal, int]]:
    totals: dict[str, list] = {}
    for order in orders:
        entry = totals.setdefault(order["customer_id"], [Decimal(0), 0])
        entry[0] += Decimal(str(order["amount"])).quantize(Decimal("0.01"))
        entry[1] += 1
    return {k: (v[0], v[1]) for k, v in totals.items()}


def expected_latest(orders: list[dict], tombstones: Iterable[tuple[str, int, int]] = ()) -> dict[str, dict]:
    """Each order's latest version; `tombstones` (order id, partition, offset) delete theirs."""
    latest: dict[str, dict] = {}
    deletes = [{"order_id": key, "partition": p, "offset": o, "deleted": True} for key, p, o in tombstones]
    for order in sorted([*orders, *deletes], key=lambda o: (o["partition"], o["offset"])):
        if order.get("deleted"):
            latest.pop(order["order_id"], None)
        else:
            latest[order["order_id"]] = order  # keys land on one partition, so offset order is the input order
    return latest


def valid_orders(records: list) -> tuple[list[dict], int]:
    """The pipeline's parsing rules, in plain Python: (valid orders with their position, malformed count)."""
    orders, malformed = [], 0
    for record in records:
        try:
            order = json.loads(record.value)
            ok = (isinstance(order, dict) and isinstance(order.get("order_id"), str)
                  and isinstance(order.get("customer_id"), str)
                  and isinstance(order.get("amount"), (int, float)) and not isinstance(order.get("amount"), bool))
        except (TypeError, ValueError):
            ok = False
        if ok:
            orders.append({**order, "partition": record.partition, "offset": record.offset})
        else:
            malformed += 1
    return orders, malformed


def main(argv: list[str] | None = None) -> int:
    """`python -m examples.orders.generate --records N [--topic orders]`: more input, e.g. for a backfill demo."""
    import argparse
    import time

    from eosbatch import config

    parser = argparse.ArgumentParser(prog="python -m examples.orders.generate")
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)
    settings = config.load()
    ensure_topics(settings, EXAMPLE_TOPICS)  # the examples' output topics too: eosbatch never creates topics
    produced = generate(settings, args.topic, args.records, args.partitions, seed=int(time.time()))
    print(f"{args.topic}: {len(produced.committed)} valid orders and {produced.malformed} malformed records "
          f"committed, {produced.aborted} records in aborted transactions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
