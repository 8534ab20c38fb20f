"""eosbatch: exactly-once batches of Kafka data into PostgreSQL and Kafka, run by Airflow and Spark."""

from eosbatch.outputs import AvroValue, JsonValue
from eosbatch.pipeline import AirflowOptions, BatchInfo, Deletes, KafkaOutput, KafkaSource, Pipeline, PostgresSink

__all__ = ["Pipeline", "AirflowOptions", "KafkaSource", "PostgresSink", "KafkaOutput", "BatchInfo", "JsonValue",
           "AvroValue", "Deletes"]
