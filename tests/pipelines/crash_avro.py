"""The crash tests' replace pipeline with an Avro output, a composite key and a copied header
(tests/chaos/test_chaos.py, kind "latest_avro"): `crash_latest_avro_<suffix>` over `crash_in_<suffix>`. A module of
its own: tests/pipelines/crash.py is also loaded by the previous release (tests/integration/test_upgrade.py)."""

import json
import os

from eosbatch import AvroValue, KafkaOutput, KafkaSource, Pipeline, PostgresSink
from examples.orders.pipeline import ORDER_SCHEMA, to_latest

SUFFIX = os.environ.get("EOSBATCH_TEST_SUFFIX", "default")
BATCH = int(os.environ.get("EOSBATCH_TEST_BATCH", "1500"))
START = os.environ.get("EOSBATCH_TEST_START", "earliest")
SCHEMA = {"type": "record", "name": "LatestOrder", "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "customer_id", "type": ["null", "string"]},
    {"name": "amount", "type": ["null", "double"]},
    {"name": "status", "type": ["null", "string"]},
]}
SCHEMA_ID = 3

latest_avro = Pipeline(
    name=f"crash_latest_avro_{SUFFIX}",
    source=KafkaSource(topics=[f"crash_in_{SUFFIX}"], max_records_per_batch=BATCH, value_schema=ORDER_SCHEMA,
                       starting_offsets=START),  # type: ignore[arg-type]
    transform=to_latest,
    sink=PostgresSink(table=f"crash_latest_avro_{SUFFIX}", key=["order_id"]),
    output=KafkaOutput(topic=f"crash_latest_avro_out_{SUFFIX}", key=["customer_id", "order_id"],
                       value=AvroValue(schema=json.dumps(SCHEMA), schema_id=SCHEMA_ID), headers={"status": "status"}),
)
