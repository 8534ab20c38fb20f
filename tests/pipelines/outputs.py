"""A pipeline whose output has a composite key, a header copied from the input record and an Avro value
(tests/integration/test_output_formats.py): `outputs_<suffix>` reads `outputs_in_<suffix>` and publishes to
`outputs_out_<suffix>`. Imported only by tests of eosbatch >= the output formats (not by the previous release)."""

import json
import os

from eosbatch import AvroValue, KafkaOutput, KafkaSource, Pipeline, PostgresSink

SUFFIX = os.environ.get("EOSBATCH_TEST_SUFFIX", "default")
INPUT_SCHEMA = ("region STRING NOT NULL, id STRING NOT NULL, amount DECIMAL(12,2), at TIMESTAMP, "
                "at_local TIMESTAMP_NTZ, day DATE, raw_hex STRING, n BIGINT, mirror_trace STRING")
SCHEMA = {"type": "record", "name": "Order", "namespace": "eosbatch.test", "fields": [
    {"name": "region", "type": "string"},
    {"name": "id", "type": "string"},
    {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}]},
    {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
    {"name": "at_local", "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}]},
    {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
    {"name": "raw", "type": ["null", "bytes"]},
    {"name": "n", "type": ["null", "long"]},
    {"name": "trace_id", "type": ["null", "string"]},
]}
SCHEMA_ID = 42


def to_orders(df):  # noqa: ANN001, ANN201 - a PySpark transform
    from pyspark.sql import functions as F

    from eosbatch.headers import header_value

    if "headers" not in df.columns:
        # Until the reader keeps Kafka's headers (issue 36, the formats part), the same header is rebuilt from
        # the copy the test writes into the value, in Kafka's shape; with the reader's headers this is skipped.
        header = F.struct(F.lit("trace-id").alias("key"), F.col("mirror_trace").cast("binary").alias("value"))
        df = df.withColumn("headers", F.when(F.col("mirror_trace").isNull(), F.array().cast(
            "array<struct<key:string,value:binary>>")).otherwise(F.array(header)))
    return df.select("region", "id", "amount", "at", "at_local", "day", F.unhex("raw_hex").alias("raw"), "n",
                     header_value("trace-id").alias("trace_id"), "partition", "offset")


def make(suffix: str) -> Pipeline:
    return Pipeline(
        name=f"outputs_{suffix}",
        source=KafkaSource(topics=[f"outputs_in_{suffix}"], value_schema=INPUT_SCHEMA),
        transform=to_orders,
        sink=PostgresSink(table=f"outputs_{suffix}", key=["region", "id"]),
        output=KafkaOutput(topic=f"outputs_out_{suffix}", key=["region", "id"],
                           value=AvroValue(schema=json.dumps(SCHEMA), schema_id=SCHEMA_ID),
                           headers={"trace-id": "trace_id"}),
    )


outputs = make(SUFFIX)
