"""Latency when data arrives: from a record committed in the source to its output record committed downstream,
through the real Airflow scheduler and triggerer (event-driven runs, AirflowOptions(trigger="data")).

    python -m bench.latency [--seconds 60] [--rate 2] [--partitions 3] [--drain 300] [--no-restart]

`eosbatch airflow up` (LocalExecutor and the triggerer; restarted first unless --no-restart) serving
bench/latency_pipelines.py's `latency_latest` (each input record becomes one output record; compact DAG shape),
its DAG unpaused and nobody triggering it. Outside the pipeline, a transactional producer commits one record
per transaction, RATE a second for SECONDS, taking the time each commit returned; a read_committed consumer of
the output topic (assigned, no group commits) takes the time each output record arrived. One warm-up record
first pays the first run after `up` (a cold task process and Spark session); it is not counted.

Prints p50, p90, p99 and max of (output seen - input committed), the records sent, received, lost and
duplicated, and the DAG runs the data started. Exit status 1 when a record was lost or duplicated.
Uses the embedded stack (EOSBATCH_HOME and the EOSBATCH_*_PORT variables choose which one).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
import uuid
from typing import Any

from eosbatch import config, stack
from eosbatch.orchestration import dags, local

PIPELINES = "bench.latency_pipelines"
PIPELINE = "latency_latest"


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100) of `values`; nan when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


class OutputWatch(threading.Thread):
    """A read_committed consumer of the output topic from its current end: when each order id came out."""

    def __init__(self, settings: config.Settings, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer, TopicPartition

        self.seen: dict[str, float] = {}
        self.duplicates: list[str] = []
        self.stopping = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, **settings.kafka_config,
                                  "group.id": f"bench-latency-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
                                  "isolation.level": "read_committed", "fetch.wait.max.ms": 50})
        metadata = self.consumer.list_topics(topic, timeout=30).topics[topic]
        starts = []
        for partition in sorted(metadata.partitions):
            _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            starts.append(TopicPartition(topic, partition, high))
        self.consumer.assign(starts)

    def run(self) -> None:
        while not self.stopping.is_set():
            message = self.consumer.poll(0.1)
            if message is None or message.error() or message.value() is None:
                continue
            now = time.time()
            order_id = json.loads(message.value())["order_id"]
            if order_id in self.seen:
                self.duplicates.append(order_id)
            else:
                self.seen[order_id] = now
        self.consumer.close()


class Source:
    """One committed transaction per record; when each commit returned."""

    def __init__(self, settings: config.Settings, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.committed: dict[str, float] = {}
        self.producer = Producer({"bootstrap.servers": settings.kafka_bootstrap, **settings.kafka_config,
                                  "transactional.id": f"bench-latency-{uuid.uuid4().hex[:8]}", "linger.ms": 0})
        self.producer.init_transactions(60)

    def send(self, order_id: str) -> None:
        value = {"order_id": order_id, "customer_id": "bench", "amount": 1.0, "status": "new"}
        self.producer.begin_transaction()
        self.producer.produce(self.topic, json.dumps(value).encode(), key=order_id.encode())
        self.producer.commit_transaction(60)
        self.committed[order_id] = time.time()


def wait_for(ids: set[str], watch: OutputWatch, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ids <= watch.seen.keys():
            return True
        time.sleep(0.1)
    return False


def dag_runs(dag: str, since: float) -> list[tuple[str, str, str]]:
    """(run id, run type, state) of the DAG's runs queued since `since` (epoch seconds)."""
    from bench.airflow import _query

    rows = _query("SELECT run_id, run_type, state FROM dag_run WHERE dag_id = %s AND queued_at >= to_timestamp(%s) "
                  "ORDER BY id", (dag, since))
    return [tuple(row) for row in rows]  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="how long the producer trickles")
    parser.add_argument("--rate", type=float, default=2, help="records (transactions) per second")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--drain", type=float, default=300, help="seconds to wait for the last outputs")
    parser.add_argument("--no-restart", action="store_true", help="keep a running Airflow")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rate <= 0 or args.partitions <= 0:
        parser.error("--seconds, --rate and --partitions must be positive")
    from bench.airflow import _api, _cli
    from bench.latency_pipelines import INPUT, OUTPUT
    from examples.orders.generate import ensure_topics

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    os.environ.update(stack.up(log=log).env())
    env = dict(os.environ)
    _cli("db", "upgrade", env=env)
    settings = config.load()
    ensure_topics(settings, {INPUT: args.partitions, OUTPUT: args.partitions})
    if not args.no_restart:
        local.down(log=log)
    local.up(log=log, base={**os.environ, config.PIPELINES: PIPELINES})
    dag = dags.dag_id(PIPELINE)
    local.wait_parsed([dag])
    _api("PATCH", f"dags/{dag}", {"is_paused": False})
    watch = OutputWatch(settings, OUTPUT)
    watch.start()
    source = Source(settings, INPUT)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    started = time.time()
    source.send(f"warm-{stamp}")
    if not wait_for({f"warm-{stamp}"}, watch, 600):
        log("the warm-up record did not come out within 600 s; see the task logs under " + str(local.home()))
        return 1
    log(f"warm-up: the first record came out {watch.seen[f'warm-{stamp}'] - source.committed[f'warm-{stamp}']:.1f}s "
        "after its commit (the first run after up)")
    measured_from = time.time()
    sent = [f"{stamp}-{n}" for n in range(max(1, round(args.seconds * args.rate)))]
    for n, order_id in enumerate(sent):
        time.sleep(max(0.0, measured_from + n / args.rate - time.time()))
        source.send(order_id)
    log(f"sent {len(sent)} records in {time.time() - measured_from:.1f}s; waiting for the last outputs")
    wait_for(set(sent), watch, args.drain)
    time.sleep(2)  # a duplicate, if any, would come out about now
    watch.stopping.set()
    watch.join(10)
    latencies = [watch.seen[i] - source.committed[i] for i in sent if i in watch.seen]
    lost = [i for i in sent if i not in watch.seen]
    duplicated = sorted(set(watch.duplicates))
    runs = dag_runs(dag, measured_from - 1)
    load = os.getloadavg()
    report: dict[str, Any] = {
        "records_sent": len(sent), "records_received": len(latencies), "lost": len(lost),
        "duplicated": len(duplicated), "rate_per_s": args.rate, "seconds": args.seconds,
        "p50_s": round(percentile(latencies, 50), 2), "p90_s": round(percentile(latencies, 90), 2),
        "p99_s": round(percentile(latencies, 99), 2), "max_s": round(max(latencies, default=float("nan")), 2),
        "min_s": round(min(latencies, default=float("nan")), 2), "dag_runs": len(runs),
        "dag_runs_by_type": {kind: sum(1 for _, t, _ in runs if t == kind) for kind in {t for _, t, _ in runs}},
        "load_average_1m": round(load[0], 1), "cores": os.cpu_count(), "wall_s": round(time.time() - started, 1)}
    print(f"\nsource commit -> output commit seen, {len(sent)} records at {args.rate:g}/s for {args.seconds:g}s, "
          f"through {dag} (trigger=data, compact), LocalExecutor; load average {load[0]:.1f} on "
          f"{os.cpu_count()} cores\n")
    print(f"  p50 {report['p50_s']:.2f}s   p90 {report['p90_s']:.2f}s   p99 {report['p99_s']:.2f}s   "
          f"min {report['min_s']:.2f}s   max {report['max_s']:.2f}s")
    print(f"  sent {len(sent)}  received {len(latencies)}  lost {len(lost)}  duplicated {len(duplicated)}  "
          f"DAG runs {len(runs)} {report['dag_runs_by_type']}")
    print(json.dumps(report))
    return 1 if lost or duplicated else 0


if __name__ == "__main__":
    sys.exit(main())
