"""The user's librdkafka settings (EOSBATCH_KAFKA_CONFIG, or the Airflow connection's extra) as the Spark
Kafka source's `kafka.`-prefixed options, so that the reads use the same security as the publisher, the
marker and the offset queries. Pure: no Kafka, no Spark.

librdkafka and the Java client do not map one to one. Supported: `security.protocol`, SASL PLAIN and SCRAM
(`sasl.mechanism(s)`, `sasl.username`, `sasl.password`, turned into a JAAS line), and TLS with a CA file
(`ssl.ca.location`, read as a PEM trust store: it must exist at that path on every Spark executor) and
`ssl.endpoint.identification.algorithm`. Client tuning that only librdkafka clients use is left to them.
Anything else (client certificates, Kerberos, OAUTHBEARER, unknown keys) is refused when the settings
load, with the key named, rather than read without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# What the reader maps (the rest of this module).
MAPPED = frozenset({"security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
                    "ssl.ca.location", "ssl.endpoint.identification.algorithm"})
# librdkafka client tuning: the producer, the marker consumer and the admin client use it; a Spark reader
# needs none of it to read the same records.
LIBRDKAFKA_ONLY = frozenset({
    "client.id", "linger.ms", "queue.buffering.max.ms", "batch.size", "batch.num.messages", "compression.type",
    "compression.codec", "message.max.bytes", "message.timeout.ms", "request.timeout.ms", "socket.timeout.ms",
    "socket.keepalive.enable", "socket.connection.setup.timeout.ms", "connections.max.idle.ms",
    "reconnect.backoff.ms", "reconnect.backoff.max.ms", "retry.backoff.ms", "retry.backoff.max.ms", "retries",
    "broker.address.family", "topic.metadata.refresh.interval.ms", "metadata.max.age.ms", "log_level", "debug",
    "statistics.interval.ms", "queue.buffering.max.messages", "queue.buffering.max.kbytes", "fetch.wait.max.ms",
    "client.rack", "api.version.request", "enable.ssl.certificate.verification",
})
# The Spark redaction pattern that hides the JAAS line (Spark redacts options by key name; "sasl.jaas.config"
# contains no "password"): both `spark.redaction.regex` and `spark.sql.redaction.options.regex` take it.
REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|jaas|url"


class Unsupported(ValueError):
    """A setting the Spark reader cannot honour; the message names it."""


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def reader_options(kafka_config: Mapping[str, Any]) -> dict[str, str]:
    """The `kafka.`-prefixed options for the Spark Kafka source; raises Unsupported naming the first setting
    it cannot carry over."""
    unknown = sorted(set(kafka_config) - MAPPED - LIBRDKAFKA_ONLY)
    if unknown:
        raise Unsupported(f"{unknown[0]!r} has no equivalent for the Spark Kafka reader; supported: "
                          f"{', '.join(sorted(MAPPED))} (and librdkafka client tuning such as linger.ms)")
    options: dict[str, str] = {}
    protocol = str(kafka_config.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in PROTOCOLS:
        raise Unsupported(f"security.protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    options["kafka.security.protocol"] = protocol
    if protocol.startswith("SASL"):
        mechanism = str(kafka_config.get("sasl.mechanism", kafka_config.get("sasl.mechanisms", "GSSAPI"))).upper()
        if mechanism not in LOGIN_MODULES:
            raise Unsupported(f"sasl.mechanism {mechanism!r}: supported: {', '.join(LOGIN_MODULES)}")
        username, password = kafka_config.get("sasl.username"), kafka_config.get("sasl.password")
        if not username or password is None:
            raise Unsupported(f"sasl.mechanism {mechanism} needs sasl.username and sasl.password")
        options["kafka.sasl.mechanism"] = mechanism
        options["kafka.sasl.jaas.config"] = (f"{LOGIN_MODULES[mechanism]} required username="
                                             f"{_jaas_quote(str(username))} password={_jaas_quote(str(password))};")
    if protocol.endswith("SSL"):
        if "ssl.ca.location" in kafka_config:
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = str(kafka_config["ssl.ca.location"])
        if "ssl.endpoint.identification.algorithm" in kafka_config:
            algorithm = str(kafka_config["ssl.endpoint.identification.algorithm"]).lower()
            options["kafka.ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else algorithm
    return options
