"""A compacted `customers` topic in Avro (the Confluent wire format, two schema versions), keyed by customer
id, where a null value deletes the customer: the latest state of each customer in a replace sink.

- The key is a String: it is the sink's key, and it is what a tombstone deletes.
- Records written with version 1 of the schema are read with version 2 (`tier` defaults to "standard").
- An unknown schema id or a record that does not decode goes to the dead letters with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eosbatch import KafkaOutput, KafkaSource, Pipeline, PostgresSink
from eosbatch.formats import Avro, String
from eosbatch.pipeline import Deletes
from examples.customers.schemas import READER_SCHEMA, WRITER_SCHEMAS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def to_customers(customers: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    # The record's key is the customer: a tombstone names only that. partition/offset order a key's versions.
    return customers.select(F.col("key").alias("customer_id"), "name", "email", "tier", "partition", "offset")


customers_latest = Pipeline(
    name="customers_latest",
    source=KafkaSource(topics=["customers"], max_records_per_batch=250, key=String(),
                       value=Avro(reader_schema=READER_SCHEMA, writer_schemas=WRITER_SCHEMAS)),
    transform=to_customers,
    sink=PostgresSink(table="customers", key=["customer_id"], deletes=Deletes()),
    output=KafkaOutput(topic="customers_latest", key="customer_id"),
)
