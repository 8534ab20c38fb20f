"""Two pipelines over the `orders` topic, one per sink mode.

- order_totals: running totals per customer (accumulate): exactly-once, not merely idempotent.
- orders_latest: the latest version of each order (replace); an order sent twice keeps its last version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink

if TYPE_CHECKING:  # pyspark loads inside the transforms, on Spark: DAG files that import this stay light
    from pyspark.sql import DataFrame

ORDER_SCHEMA = "order_id STRING NOT NULL, customer_id STRING NOT NULL, amount DOUBLE NOT NULL, status STRING"


def to_totals(orders: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return orders.groupBy("customer_id").agg(
        # decimal, not double: running totals must add up exactly, whatever the batch boundaries.
        F.sum(F.col("amount").cast("decimal(18,2)")).cast("decimal(18,2)").alias("total_amount"),
        F.count("*").alias("order_count"))


def to_latest(orders: DataFrame) -> DataFrame:
    # Keeping partition/offset lets eosbatch resolve an order repeated in one batch to its last version.
    return orders.select("order_id", "customer_id", "amount", "status", "partition", "offset")


order_totals = Pipeline(
    name="order_totals",
    source=KafkaSource(topics=["orders"], max_records_per_batch=50_000, value_schema=ORDER_SCHEMA),
    transform=to_totals,
    sink=PostgresSink(table="customer_totals", key=["customer_id"], mode="accumulate",
                      accumulate=["total_amount", "order_count"]),
    output=KafkaOutput(topic="customer_totals", key="customer_id"),
)

orders_latest = Pipeline(
    name="orders_latest",
    source=KafkaSource(topics=["orders"], max_records_per_batch=50_000, value_schema=ORDER_SCHEMA),
    transform=to_latest,
    sink=PostgresSink(table="orders_latest", key=["order_id"]),
    output=KafkaOutput(topic="orders_latest", key="order_id"),
)

# Started at the end of `orders`: it sees only what arrives after its first run, and its history comes
# in through `eosbatch backfill` (see docs/how-to/backfill.md).
order_totals_live = Pipeline(
    name="order_totals_live",
    source=KafkaSource(topics=["orders"], max_records_per_batch=8_000, value_schema=ORDER_SCHEMA,
                       starting_offsets="latest"),
    transform=to_totals,
    sink=PostgresSink(table="customer_totals_live", key=["customer_id"], mode="accumulate",
                      accumulate=["total_amount", "order_count"]),
    output=KafkaOutput(topic="customer_totals_live", key="customer_id"),
)
