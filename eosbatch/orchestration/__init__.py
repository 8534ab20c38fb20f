"""Airflow orchestration: the DAG factory, connections, and a local Airflow on the embedded stack.

Nothing here imports Airflow, Spark, Kafka or PostgreSQL clients at module level except `dags`, which
imports only `airflow.sdk`: DAG files stay cheap to parse.
"""
