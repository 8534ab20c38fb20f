"""An independent judge of a pipeline's history (issue 37, item 5), in the spirit of Jepsen's Kafka workload and
Elle: `collect` reads what Kafka and PostgreSQL hold with confluent_kafka and psycopg2 directly, `checker` finds
the anomalies in that plain value. Nothing here imports eosbatch: the judge is not the code under test
(tests/test_architecture.py holds it to that)."""
