"""Bumping a transactional id's producer epoch: `init_transactions` on a new confluent_kafka producer, again and
again, exactly as each `eosbatch run` does once.

A librdkafka producer initialises its transactions once, so each bump is a new producer; and two producers of one
id cannot initialise at the same time (the coordinator answers CONCURRENT_TRANSACTIONS). What can overlap is the
part before: a few threads make producers and wait until each is connected (its metadata answered), so that the
bumping thread only calls `init_transactions` on a warm one: FindCoordinator, a connection to the coordinator and
InitProducerId, about 2 ms on this machine. Cold, a producer costs ~60 ms: librdkafka waits out its sparse-connect
interval (half of reconnect.backoff.ms, so 0 here leaves its 11 ms floor) after the bootstrap connection, and an
`init_transactions` called before any broker is up waits for its 500 ms coordinator-query timer."""

from __future__ import annotations

import queue
import threading
import time
from typing import NamedTuple

from confluent_kafka import Producer

from eosbatch.config import Settings
from eosbatch.kafka import clients

WARMERS = 4  # threads making producers: 4 kept the bumping thread busy here (8: no faster, 12: slower)


class Bumped(NamedTuple):
    calls: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0


def bump(settings: Settings, transactional_id: str, calls: int, warmers: int = WARMERS,
         progress=None) -> Bumped:  # type: ignore[no-untyped-def]
    """Call init_transactions `calls` times on `transactional_id`, one producer each, one after the other.
    `progress(done, elapsed)` is called every 1000 calls."""
    conf = clients.config(settings, **{"transactional.id": transactional_id, "reconnect.backoff.ms": 0})
    warm: queue.Queue[Producer] = queue.Queue(maxsize=2 * warmers)
    used: queue.Queue[Producer | None] = queue.Queue()
    wanted = threading.Semaphore(calls)  # no more producers than calls
    failures: list[BaseException] = []
    stop = threading.Event()

    def make() -> None:
        try:
            while not stop.is_set() and wanted.acquire(blocking=False):
                producer = Producer(conf)
                producer.list_topics(timeout=30)  # connected: init_transactions finds a broker at once
                while not stop.is_set():
                    try:
                        warm.put(producer, timeout=0.5)
                        break
                    except queue.Full:
                        pass
        except BaseException as exc:  # noqa: BLE001 - reported by the bumping thread
            failures.append(exc)

    def free() -> None:  # a producer's destruction joins its threads: off the bumping thread
        while used.get() is not None:
            pass

    makers = [threading.Thread(target=make, daemon=True) for _ in range(warmers)]
    freer = threading.Thread(target=free, daemon=True)
    for thread in [*makers, freer]:
        thread.start()
    started = time.monotonic()
    try:
        for done in range(calls):
            while True:
                try:
                    producer = warm.get(timeout=1)
                    break
                except queue.Empty:
                    if failures:
                        raise RuntimeError(f"making a producer failed after {done} calls") from failures[0]
            producer.init_transactions(60)
            used.put(producer)
            del producer
            if progress is not None and (done + 1) % 1000 == 0:
                progress(done + 1, time.monotonic() - started)
        return Bumped(calls, time.monotonic() - started)
    finally:
        stop.set()
        used.put(None)
        for thread in makers:
            thread.join(timeout=60)
        freer.join(timeout=60)
