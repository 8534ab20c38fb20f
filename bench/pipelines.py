"""The benchmark's pipelines, defined from EOSBATCH_BENCH_PIPELINES (JSON, set by bench.run).

Each run gets fresh topics, a fresh sink table and a fresh pipeline name, so runs never mix. The
definitions come from the environment because the spark-submit driver, its executors and the publish
child import this module too, and must build the same pipelines as the process that planned them.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from bench import PIPELINES_ENV
from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink
from eosbatch.formats import Json

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ORDER_SCHEMA = ("order_id STRING NOT NULL, customer_id STRING NOT NULL, amount DOUBLE NOT NULL, "
                "status STRING, note STRING")


def latest(orders: DataFrame) -> DataFrame:
    # partition/offset let the replace sink keep the last version of an order repeated within the batch.
    return orders.select("order_id", "customer_id", "amount", "status", "note", "partition", "offset")


def define(name: str, topic: str, output: str, max_records: int, arrow: bool = True) -> Pipeline:
    """`arrow`: the value's Json parse by pyarrow where it may (the default); False: from_json (bench.process_ab)."""
    return Pipeline(
        name=name,
        source=KafkaSource(topics=[topic], max_records_per_batch=max_records, value=Json(ORDER_SCHEMA, arrow=arrow)),
        transform=latest,
        sink=PostgresSink(table=name, key=["order_id"]),
        output=KafkaOutput(topic=output, key="order_id"),
    )


PIPELINES = [define(**spec) for spec in json.loads(os.environ.get(PIPELINES_ENV, "[]"))]
