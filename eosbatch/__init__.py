"""eosbatch: exactly-once batches of Kafka data into PostgreSQL and Kafka, run by Airflow and Spark."""

from eosbatch.pipeline import AirflowOptions, Deletes, KafkaOutput, KafkaSource, Pipeline, PostgresSink

__all__ = ["Pipeline", "AirflowOptions", "KafkaSource", "PostgresSink", "KafkaOutput", "Deletes"]
