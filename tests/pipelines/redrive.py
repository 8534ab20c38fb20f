"""The pipeline of tests/integration/test_redrive.py, before and after its schema is fixed: a value without
`n` is a dead letter until EOSBATCH_TEST_FIXED=1 makes `n` nullable. EOSBATCH_TEST_SUFFIX names its topics and
table."""

import os
from typing import Any

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink

SUFFIX = os.environ.get("EOSBATCH_TEST_SUFFIX", "default")
FIXED = os.environ.get("EOSBATCH_TEST_FIXED") == "1"
SCHEMA = "id STRING NOT NULL, n INT" if FIXED else "id STRING NOT NULL, n INT NOT NULL"


def to_rows(records: Any) -> Any:
    from pyspark.sql import functions as F

    # The record's timestamp as epoch milliseconds (verify's recompute compares timestamp columns as text).
    return records.select("id", "n", F.unix_millis("timestamp").alias("ts"), "partition", "offset")


redrive = Pipeline(
    name=f"redrive_{SUFFIX}",
    source=KafkaSource(topics=[f"redrive_in_{SUFFIX}"], max_records_per_batch=1000, value_schema=SCHEMA),
    transform=to_rows,
    sink=PostgresSink(table=f"redrive_{SUFFIX}", key=["id"]),
    output=KafkaOutput(topic=f"redrive_out_{SUFFIX}", key="id"),
)
