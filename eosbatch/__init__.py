"""eosbatch: exactly-once batches of Kafka data into PostgreSQL and Kafka, run by Airflow and Spark."""

from eosbatch.pipeline import KafkaOutput, KafkaSource, Pipeline, PostgresSink

__all__ = ["Pipeline", "KafkaSource", "PostgresSink", "KafkaOutput"]
