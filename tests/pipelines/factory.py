"""The test pipelines over one input topic `crash_in_<suffix>`, one per sink mode, built by `make` (and
`make_events`, the append sink's, for an eosbatch that has one) for the modules that name their suffixes
(tests/pipelines/crash.py, scheduled.py)."""

import functools
from collections.abc import Callable, Iterator
from typing import Any

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink
from examples.orders.pipeline import ORDER_SCHEMA, to_latest, to_totals


def _pause(batches: Iterator[Any], seconds: float) -> Iterator[Any]:
    import time

    time.sleep(seconds)
    yield from batches


def slowed(transform: Callable[[Any], Any], seconds: float) -> Callable[[Any], Any]:
    """`transform` after every Spark task has slept `seconds`: a process step that lasts long enough for a
    test to do something while it runs, whatever the engine."""

    def slow(orders: Any) -> Any:
        return transform(orders.mapInArrow(functools.partial(_pause, seconds=seconds), orders.schema))

    return slow


def make(suffix: str, batch: int = 1500, start: str = "earliest", slow: float = 0,
         batches_per_run: int | None = None, shape: str | None = None, trigger: str | None = None
         ) -> tuple[Pipeline, Pipeline]:
    """(crash_totals_<suffix>, crash_latest_<suffix>); `start` "latest": a pipeline started at the end;
    `slow`: seconds every Spark task of the totals pipeline's transform sleeps first; `batches_per_run`:
    the most batches a run of their micro-batch DAGs processes (None: eosbatch's default); `shape`: their
    micro-batch DAG's shape (AirflowOptions.shape; None: eosbatch's default); `trigger`: "data", their DAGs
    run when data arrives (AirflowOptions.trigger, polled every 0.5 s). Without these, nothing
    newer than the previous release is imported or passed: tests/integration/test_upgrade.py loads this module
    with the previous release's eosbatch."""
    airflow: dict[str, Any] = {}
    if batches_per_run is not None or shape is not None or trigger is not None:
        from eosbatch import AirflowOptions

        options: dict[str, Any] = {"batches_per_run": batches_per_run} if batches_per_run is not None else {}
        if trigger:
            options.update(trigger=trigger, data_poll_seconds=0.5)
        airflow["airflow"] = AirflowOptions(**options, **({"shape": shape} if shape else {}))
    totals = Pipeline(
        name=f"crash_totals_{suffix}",
        source=KafkaSource(topics=[f"crash_in_{suffix}"], max_records_per_batch=batch, value_schema=ORDER_SCHEMA,
                           starting_offsets=start),  # type: ignore[arg-type]
        transform=slowed(to_totals, slow) if slow else to_totals,
        sink=PostgresSink(table=f"crash_totals_{suffix}", key=["customer_id"], mode="accumulate",
                          accumulate=["total_amount", "order_count"]),
        output=KafkaOutput(topic=f"crash_totals_out_{suffix}", key="customer_id"),
        **airflow,
    )
    latest = Pipeline(
        name=f"crash_latest_{suffix}",
        source=KafkaSource(topics=[f"crash_in_{suffix}"], max_records_per_batch=batch, value_schema=ORDER_SCHEMA,
                           starting_offsets=start),  # type: ignore[arg-type]
        transform=to_latest,
        sink=PostgresSink(table=f"crash_latest_{suffix}", key=["order_id"]),
        output=KafkaOutput(topic=f"crash_latest_out_{suffix}", key="order_id"),
        **airflow,
    )
    return totals, latest


def make_deletes(suffix: str, batch: int = 1500, start: str = "earliest") -> Pipeline:
    """crash_deletes_<suffix>: crash_latest's pipeline whose sink takes deletes (a tombstone keyed by an order id
    deletes the order). Imports the deletes API only when called: the previous release lacks it."""
    from eosbatch import Deletes

    return Pipeline(
        name=f"crash_deletes_{suffix}",
        source=KafkaSource(topics=[f"crash_in_{suffix}"], max_records_per_batch=batch, value_schema=ORDER_SCHEMA,
                           starting_offsets=start),  # type: ignore[arg-type]
        transform=to_latest,
        sink=PostgresSink(table=f"crash_deletes_{suffix}", key=["order_id"], deletes=Deletes()),
        output=KafkaOutput(topic=f"crash_deletes_out_{suffix}", key="order_id"),
    )


def to_evolving(orders: Any, batch: Any) -> Any:
    """to_latest's columns; from the second batch on (a batch whose ranges do not start at the log's start) also
    `detail`, a struct of the order's customer and id that the evolving sink adds as a jsonb column: the same code,
    the shape driven by what the batch holds."""
    from pyspark.sql import functions as F

    latest = to_latest(orders)
    if all(r.start == 0 for r in batch.ranges):
        return latest
    return latest.withColumn("detail", F.struct("customer_id", "order_id"))


def make_evolving(suffix: str, batch: int = 1500, start: str = "earliest") -> Pipeline:
    """crash_evolving_<suffix>: crash_latest's pipeline whose sink evolves (PostgresSink(evolve=True)) and whose
    transform (to_evolving) brings a jsonb column from its second batch on. Uses the evolving sink and batch
    info only when called: the previous release lacks them."""
    return Pipeline(
        name=f"crash_evolving_{suffix}",
        source=KafkaSource(topics=[f"crash_in_{suffix}"], max_records_per_batch=batch, value_schema=ORDER_SCHEMA,
                           starting_offsets=start),  # type: ignore[arg-type]
        transform=to_evolving,
        sink=PostgresSink(table=f"crash_evolving_{suffix}", key=["order_id"], evolve=True),  # type: ignore[call-arg]
        output=KafkaOutput(topic=f"crash_evolving_out_{suffix}", key="order_id"),
    )


def to_events(orders: Any) -> Any:
    """Each order as two ledger entries (a debit and a credit): a record the transform makes two rows of, kept
    at its source position, for the append sink."""
    from pyspark.sql import functions as F

    side = F.explode(F.array(F.lit("credit"), F.lit("debit"))).alias("side")
    entries = orders.select("topic", "partition", "offset", "order_id", "customer_id", "amount", side)
    signed = F.when(F.col("side") == "debit", -F.col("amount")).otherwise(F.col("amount"))
    return entries.withColumn("amount", signed)


def make_events(suffix: str, batch: int = 1500, start: str = "earliest") -> Pipeline | None:
    """crash_events_<suffix>: the orders' ledger entries appended (an append sink); None for an eosbatch
    without append sinks (the previous release loads this module too)."""
    import eosbatch

    if not hasattr(eosbatch, "BatchInfo"):
        return None
    return Pipeline(
        name=f"crash_events_{suffix}",
        source=KafkaSource(topics=[f"crash_in_{suffix}"], max_records_per_batch=batch, value_schema=ORDER_SCHEMA,
                           starting_offsets=start),  # type: ignore[arg-type]
        transform=to_events,
        sink=PostgresSink(table=f"crash_events_{suffix}", mode="append"),  # type: ignore[call-arg]
        output=KafkaOutput(topic=f"crash_events_out_{suffix}", key="order_id"),
    )
