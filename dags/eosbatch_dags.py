"""eosbatch's DAGs: three per pipeline registered in EOSBATCH_PIPELINES (see eosbatch.orchestration.dags).

Parsing this file imports the pipeline modules and airflow.sdk, nothing heavier: Spark, Kafka and
PostgreSQL clients load inside the tasks.
"""

from eosbatch.orchestration.dags import registered

globals().update(registered())
