"""Pipelines for the crash tests; EOSBATCH_TEST_SUFFIX gives each test its own topics, tables and ledger rows."""

import os

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink
from examples.orders.pipeline import ORDER_SCHEMA, to_latest, to_totals

SUFFIX = os.environ.get("EOSBATCH_TEST_SUFFIX", "default")
BATCH = int(os.environ.get("EOSBATCH_TEST_BATCH", "1500"))
START = os.environ.get("EOSBATCH_TEST_START", "earliest")  # "latest": a pipeline started at the end

totals = Pipeline(
    name=f"crash_totals_{SUFFIX}",
    source=KafkaSource(topics=[f"crash_in_{SUFFIX}"], max_records_per_batch=BATCH, value_schema=ORDER_SCHEMA,
                       starting_offsets=START),
    transform=to_totals,
    sink=PostgresSink(table=f"crash_totals_{SUFFIX}", key=["customer_id"], mode="accumulate",
                      accumulate=["total_amount", "order_count"]),
    output=KafkaOutput(topic=f"crash_totals_out_{SUFFIX}", key="customer_id"),
)

latest = Pipeline(
    name=f"crash_latest_{SUFFIX}",
    source=KafkaSource(topics=[f"crash_in_{SUFFIX}"], max_records_per_batch=BATCH, value_schema=ORDER_SCHEMA,
                       starting_offsets=START),
    transform=to_latest,
    sink=PostgresSink(table=f"crash_latest_{SUFFIX}", key=["order_id"]),
    output=KafkaOutput(topic=f"crash_latest_out_{SUFFIX}", key="order_id"),
)
