"""Pipelines for tests/integration/test_sink_shapes.py over `shapes_in_<suffix>` (EOSBATCH_TEST_SUFFIX):

- shapes_<suffix>: an evolving replace sink whose transform changes with EOSBATCH_TEST_SHAPE: "1" id and n;
  "2" adds a struct and a map (jsonb) and an array (text[]); "3" makes n a struct, which the sink's integer
  cannot take.
- ranged_<suffix>: an append sink whose transform takes the batch's info and makes two rows of each record (its id
  and its id's copy), each with `range_start`, the start of the batch's range of its partition
  (EOSBATCH_TEST_BATCH records a batch).
"""

from __future__ import annotations

import os
from typing import Any

from eosbatch import BatchInfo, KafkaOutput, KafkaSource, Pipeline, PostgresSink

SUFFIX = os.environ.get("EOSBATCH_TEST_SUFFIX", "default")
SHAPE = os.environ.get("EOSBATCH_TEST_SHAPE", "1")
BATCH = int(os.environ.get("EOSBATCH_TEST_BATCH", "1000"))
VALUE = "id STRING NOT NULL, n INT, tags ARRAY<STRING>, a INT, b STRING"


def shaped(records: Any) -> Any:
    from pyspark.sql import functions as F

    columns = [F.col("id"), F.col("n"), F.col("partition"), F.col("offset")]
    if SHAPE in ("2", "3"):
        columns += [F.struct("a", "b").alias("detail"), F.col("tags"), F.create_map(F.lit("a"), F.col("a")).alias("m")]
    if SHAPE == "3":
        columns[1] = F.struct(F.col("n").alias("value")).alias("n")
    return records.select(*columns)


def ranged(records: Any, batch: BatchInfo) -> Any:
    from pyspark.sql import functions as F

    start = F.lit(None).cast("bigint")
    for r in batch.ranges:
        here = (F.col("topic") == r.topic) & (F.col("partition") == r.partition)
        start = F.when(here, F.lit(r.start)).otherwise(start)
    copies = F.explode(F.array(F.col("id"), F.concat(F.col("id"), F.lit("-copy")))).alias("id")
    return records.select("topic", "partition", "offset", copies, start.alias("range_start"))


source = KafkaSource(topics=[f"shapes_in_{SUFFIX}"], max_records_per_batch=BATCH, value_schema=VALUE)
shapes = Pipeline(name=f"shapes_{SUFFIX}", source=source, transform=shaped,
                  sink=PostgresSink(table=f"shapes_{SUFFIX}", key=["id"], evolve=True),
                  output=KafkaOutput(topic=f"shapes_out_{SUFFIX}", key="id"))
ranges = Pipeline(name=f"ranged_{SUFFIX}", source=source, transform=ranged,
                  sink=PostgresSink(table=f"ranged_{SUFFIX}", mode="append"),
                  output=KafkaOutput(topic=f"ranged_out_{SUFFIX}", key="id"))
