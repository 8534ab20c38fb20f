"""bench.latency's pipeline: examples.orders' orders_latest over a topic of its own, run when data arrives
(AirflowOptions(trigger="data"), the compact DAG shape): each input record becomes one output record."""

from __future__ import annotations

import dataclasses

from eosbatch import AirflowOptions, KafkaOutput, KafkaSource, PostgresSink
from examples.orders import pipeline as orders  # the module, not its pipelines: they are not registered here

INPUT, OUTPUT = "latency_in", "latency_out"

latency_latest = dataclasses.replace(
    orders.orders_latest, name="latency_latest", schedule=None,
    airflow=AirflowOptions(trigger="data", shape="compact"),
    source=KafkaSource(topics=[INPUT], max_records_per_batch=50_000, value_schema=orders.ORDER_SCHEMA),
    sink=PostgresSink(table="latency_latest", key=["order_id"]),
    output=KafkaOutput(topic=OUTPUT, key="order_id"))
