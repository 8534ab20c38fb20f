"""The columns both Kafka readers give (eosbatch.spark.reader, eosbatch.spark.kafka_datasource)."""

# The Kafka source's columns (with headers: includeHeaders), fixed by the connector: knowing them spares the Spark
# Connect client a round trip to the server per batch to ask. The Python reader gives the same.
KAFKA_COLUMNS = "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, " \
                "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
