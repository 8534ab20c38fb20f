"""Versions of the real components the embedded stack runs."""

from eosbatch.config import installed_pyspark

KAFKA_VERSION = "4.1.1"
SCALA_BINARY = "2.13"
# PySpark 4.x is built for Scala 2.13; the connector must be the exact Spark version of the installed PySpark
# (the Connect server `stack up` starts runs that PySpark's own Spark).
PYSPARK_VERSION = installed_pyspark()
LOG4J_VERSION = "2.24.3"
SLF4J_VERSION = "2.0.17"
# A Confluent-compatible Schema Registry for `stack up --schema-registry`: Apicurio Registry's own server
# distribution (the Quarkus fast-jar its release attaches to the app's Maven artifact as `-all.tar.gz`), run on
# in-memory H2. Its classes are Java 21 (class file 65): it needs a JDK >= 21 (eosbatch.stack.schema_registry).
APICURIO_REGISTRY_VERSION = "3.3.3"
APICURIO_REGISTRY_DISTRIBUTION = f"io.apicurio:apicurio-registry-app:{APICURIO_REGISTRY_VERSION}:tar.gz:all"

KAFKA_BROKER = [
    f"org.apache.kafka:kafka_{SCALA_BINARY}:{KAFKA_VERSION}",
    f"org.apache.logging.log4j:log4j-core:{LOG4J_VERSION}",
    f"org.apache.logging.log4j:log4j-slf4j2-impl:{LOG4J_VERSION}",
    f"org.slf4j:slf4j-api:{SLF4J_VERSION}",
]
# Listed one by one (not resolved transitively): Spark's parent pom names repositories this machine
# cannot reach. These are the connector's runtime dependencies that PySpark does not ship itself.
SPARK_KAFKA_CONNECTOR = [
    f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_BINARY}:{PYSPARK_VERSION}",
    f"org.apache.spark:spark-token-provider-kafka-0-10_{SCALA_BINARY}:{PYSPARK_VERSION}",
    "org.apache.kafka:kafka-clients:3.9.2",
    "org.apache.commons:commons-pool2:2.13.1",
]
# spark-avro's from_avro decodes Avro values and keys (eosbatch.formats.Avro) in the JVM. Like the Kafka connector,
# a jar of Spark itself: the exact Spark version of the installed PySpark. Its own dependencies (avro, avro-mapred,
# xz) are among PySpark's jars. A folder of its own in the cache, so that a cache fetched before it stays valid.
SPARK_AVRO = [f"org.apache.spark:spark-avro_{SCALA_BINARY}:{PYSPARK_VERSION}"]
