"""The bench's harness, shared by bench.run and the benchmarks beside it: the runs it names (Run) and the
timings it reports (Timing), the stack it uses and the pipelines it defines, the clock and CPU it measures
with, and the cleanup of all an invocation made."""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import psycopg2
from confluent_kafka.admin import AdminClient
from psycopg2 import sql

from bench import PIPELINES_ENV, cpu
from eosbatch import config, registry, stack
from eosbatch.config import Settings
from eosbatch.ledger import migrate

RECORD_BYTES = 200
TRANSACTION_SIZE = 10_000  # input records per Kafka transaction
WARM_UP_RECORDS = 1_000_000
WARM_UP_RUNS = 4
MODULE = "bench.pipelines"


class Run(NamedTuple):
    name: str  # the pipeline's and its sink table's name, and its topics' prefix
    records: int

    @property
    def topic(self) -> str:
        return f"{self.name}_in"

    @property
    def output(self) -> str:
        return f"{self.name}_out"


class Timing(NamedTuple):
    step: str
    records: int
    seconds: float
    cpu: cpu.Usage | None = None

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else math.inf


# ---------------------------------------------------------------- setup

def _settings() -> Settings:
    if not (os.environ.get(config.DATABASE_URL) and os.environ.get(config.KAFKA_BOOTSTRAP)):
        os.environ.update(stack.up().env())
    settings = config.load()
    migrate.upgrade(settings.database_url)
    return settings


def _padding() -> int:
    """The `note` length that brings a typical generated order to RECORD_BYTES."""
    sample = {"order_id": "o-500000", "customer_id": "c-100", "amount": 250.5, "status": "paid", "note": ""}
    return max(0, RECORD_BYTES - len(json.dumps(sample)))


def _define(runs: list[Run], partitions: int) -> None:
    """Describe the runs' pipelines to bench.pipelines, here and in every process that inherits the
    environment (the spark-submit driver and its executors, the --rss-check run children)."""
    # Each input transaction leaves a commit marker offset in every partition: a batch of exactly N offsets
    # would leave the last records to a second batch.
    specs = [{"name": r.name, "topic": r.topic, "output": r.output,
              "max_records": r.records + math.ceil(r.records / TRANSACTION_SIZE) * partitions} for r in runs]
    os.environ[PIPELINES_ENV] = json.dumps(specs)
    modules = registry.modules()
    os.environ[config.PIPELINES] = ",".join(modules if MODULE in modules else [*modules, MODULE])


# ---------------------------------------------------------------- measuring

def _timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def _servers() -> dict[str, int | None]:
    """The process trees whose CPU time the bench reports: the stack's servers, and this process with its
    children (the peer's spark-submit JVM; eosbatch's own when the engine is spark-submit)."""
    found = stack.status()
    return {"postgres": found.postgres_pid, "kafka": found.kafka_pid, "spark connect": found.spark_connect_pid,
            "bench + children": os.getpid()}


def _measured(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float, cpu.Usage]:
    """_timed, plus the CPU time the machine and each server spent meanwhile."""
    roots = _servers()
    before = cpu.sample(roots)
    result, seconds = _timed(fn, *args, **kwargs)
    return result, seconds, cpu.usage(before, cpu.sample(roots))


# ---------------------------------------------------------------- cleanup

def _cleanup(settings: Settings, prefix: str) -> None:
    """Drop what this invocation made, all named from its prefix: topics, and tables in any schema (sinks,
    staging, outboxes, the peer's and the ceilings'), and the peer's checkpoints. Left behind, a few sittings
    filled tens of GB."""
    for checkpoint in (stack.home() / "bench-checkpoints").glob(f"{prefix}*"):
        shutil.rmtree(checkpoint, ignore_errors=True)
    admin = AdminClient(settings.kafka())
    topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result()
    connection = psycopg2.connect(settings.psycopg_dsn)
    try:
        with connection, connection.cursor() as cur:
            cur.execute("SELECT schemaname, tablename FROM pg_tables WHERE starts_with(tablename, %s) OR "
                        "starts_with(tablename, 'stage_' || %s) OR starts_with(tablename, 'outbox_' || %s)",
                        (prefix, prefix, prefix))
            for schema, table in cur.fetchall():
                cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, table)))
    finally:
        connection.close()
