"""The soak's steady input: a thread producing orders at a fixed rate into the pipeline's input topic, in Kafka
transactions of its own (every 5th aborted, its orders from "ghost" customers that must appear nowhere), with a
malformed record now and then (a dead letter). The records have the shape of examples/orders/generate.py's, so
the end check reads them with the same rules (generate.valid_orders).

Faults hit the producer too (a broker killed, a leader moved): a transaction whose commit fails or times out is
abandoned with its producer, and a new producer's init_transactions settles it (committed or aborted, whichever
the coordinator decided). What the input holds is what a read_committed reader sees at the end, never what this
thread believes it wrote, so an ambiguous commit here cannot make the check wrong."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass

from confluent_kafka import KafkaException

from eosbatch.config import Settings
from eosbatch.kafka import clients
from examples.orders.generate import MALFORMED

TRANSACTION_SECONDS = 0.5  # one transaction every half second: rate / 2 records each
ABORT_EVERY = 5
MALFORMED_EVERY = 331
CUSTOMERS = 40


@dataclass
class LoadFigures:
    produced: int = 0        # records sent in transactions that committed
    aborted: int = 0         # records sent in transactions aborted on purpose
    abandoned: int = 0       # records in transactions whose commit failed or timed out (outcome settled later)
    transactions: int = 0
    producers: int = 0       # producers made: 1 + one per abandoned transaction
    errors: int = 0


class SteadyLoad:
    """`rate` records a second into `topic` until stop(); figures() at any time."""

    def __init__(self, settings: Settings, topic: str, rate: float, seed: int, partitions: int = 3) -> None:
        self.settings, self.topic, self.rate = settings, topic, rate
        self.rng = random.Random(seed)
        self.seed = seed
        self.partitions = partitions
        self.figures = LoadFigures()
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-load", daemon=True)
        self._sequence = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 120) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the load thread did not stop within {timeout:.0f}s (last error: {self.last_error})")

    def _producer(self):  # type: ignore[no-untyped-def]
        self.figures.producers += 1
        producer = clients.producer(self.settings, **{"transactional.id": f"soak-load-{self.topic}-{self.seed}",
                                                      "linger.ms": 20, "partitioner": "murmur2_random",
                                                      "transaction.timeout.ms": 60000})
        producer.init_transactions(60)
        return producer

    def _run(self) -> None:
        producer = None
        size = max(1, round(self.rate * TRANSACTION_SECONDS))
        due = time.monotonic()
        while not self._stop.is_set():
            due = max(due + TRANSACTION_SECONDS, time.monotonic() - 5)  # catch up after a stall, 5 s at most
            if self._stop.wait(max(0.0, due - time.monotonic())):
                break
            try:
                producer = producer or self._producer()
                self._transaction(producer, size)
            except Exception as exc:  # noqa: BLE001 - a broker down, a timeout, a fenced or fatal producer: go on
                self.figures.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                producer = None  # the next one's init_transactions settles whatever this one left open
                self._stop.wait(1.0)  # a broker coming back: do not spin on it
        if producer is None and self.figures.transactions:  # the last transaction failed: settle it now
            try:
                self._producer()
            except Exception as exc:  # noqa: BLE001 - it times out on the broker's side (transaction.timeout.ms)
                self.last_error = f"settling the last transaction: {type(exc).__name__}: {exc}"

    def _transaction(self, producer, size: int) -> None:  # type: ignore[no-untyped-def]
        self.figures.transactions += 1
        abort = self.figures.transactions % ABORT_EVERY == 0
        producer.begin_transaction()
        for _ in range(size):
            self._sequence += 1
            key, value = self._record(abort)
            producer.produce(self.topic, value=value, key=key)
            producer.poll(0)
        if abort:
            producer.abort_transaction(30)
            self.figures.aborted += size
            return
        try:
            producer.commit_transaction(30)
        except KafkaException:
            self.figures.abandoned += size
            raise
        self.figures.produced += size

    def _record(self, abort: bool) -> tuple[bytes, bytes]:
        sequence, rng = self._sequence, self.rng
        if not abort and sequence % MALFORMED_EVERY == 0:
            return f"bad-{sequence}".encode(), MALFORMED[sequence % len(MALFORMED)]
        order_no = rng.randrange(1, sequence + 1) if rng.random() < 0.1 else sequence  # 1 in 10 an update
        order = {"order_id": f"o-{order_no}", "customer_id": f"{'ghost' if abort else 'c'}-{rng.randrange(CUSTOMERS)}",
                 "amount": round(rng.uniform(1, 500), 2), "status": rng.choice(["new", "paid", "shipped"])}
        return f"o-{order_no}".encode(), json.dumps(order).encode()
