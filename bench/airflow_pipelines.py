"""bench.airflow's second pipeline: examples.orders' order_totals in the compact DAG shape, with a topic, sink
table and output topic of its own (`python -m bench.airflow --pipeline order_totals,order_totals_compact`)."""

from __future__ import annotations

import dataclasses

from eosbatch import AirflowOptions, KafkaOutput, KafkaSource, PostgresSink
from examples.orders.pipeline import ORDER_SCHEMA, order_totals

order_totals_compact = dataclasses.replace(
    order_totals, name="order_totals_compact", airflow=AirflowOptions(shape="compact"),
    source=KafkaSource(topics=["orders_compact"], max_records_per_batch=50_000, value_schema=ORDER_SCHEMA),
    sink=PostgresSink(table="customer_totals_compact", key=["customer_id"], mode="accumulate",
                      accumulate=["total_amount", "order_count"]),
    output=KafkaOutput(topic="customer_totals_compact", key="customer_id"))
