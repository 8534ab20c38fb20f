"""bench.airflow's second pipeline: examples.orders' order_totals in the compact DAG shape, on the same topic,
with its own name, sink table and output topic (`python -m bench.airflow --pipeline order_totals_compact`)."""

from __future__ import annotations

import dataclasses

from eosbatch import AirflowOptions, KafkaOutput, PostgresSink
from examples.orders.pipeline import order_totals

order_totals_compact = dataclasses.replace(
    order_totals, name="order_totals_compact", airflow=AirflowOptions(shape="compact"),
    sink=PostgresSink(table="customer_totals_compact", key=["customer_id"], mode="accumulate",
                      accumulate=["total_amount", "order_count"]),
    output=KafkaOutput(topic="customer_totals_compact", key="customer_id"))
