"""librdkafka settings as the Spark Kafka reader's options, and what an ACL refusal tells the operator."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from eosbatch.kafka.errors import missing_acl
from eosbatch.spark_kafka_options import Unsupported, reader_options

pytestmark = pytest.mark.unit


def test_open_broker_needs_nothing_but_the_protocol() -> None:
    assert reader_options({}) == {"kafka.security.protocol": "PLAINTEXT"}
    assert reader_options({"linger.ms": 5, "client.id": "x"}) == {"kafka.security.protocol": "PLAINTEXT"}


@pytest.mark.parametrize(("mechanism", "module"), [
    ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ("scram-sha-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
])
def test_sasl_becomes_a_jaas_line_with_quotes_escaped(mechanism: str, module: str) -> None:
    options = reader_options({"security.protocol": "sasl_ssl", "sasl.mechanisms": mechanism,
                              "sasl.username": "etl", "sasl.password": 'p"w\\x', "ssl.ca.location": "/ca.pem",
                              "ssl.endpoint.identification.algorithm": "none"})
    assert options == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": mechanism.upper(),
        "kafka.sasl.jaas.config": f'{module} required username="etl" password="p\\"w\\\\x";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/ca.pem",
        "kafka.ssl.endpoint.identification.algorithm": ""}


@pytest.mark.parametrize(("config", "named"), [
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI", "sasl.username": "u", "sasl.password": "p"},
     "GSSAPI"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u"}, "sasl.password"),
    ({"ssl.key.location": "/k.pem"}, "ssl.key.location"),
    ({"bootstrap.servers.typo": "x"}, "bootstrap.servers.typo"),
])
def test_what_the_reader_cannot_honour_is_refused_by_name(config: dict, named: str) -> None:
    with pytest.raises(Unsupported, match=named.replace(".", r"\.")):
        reader_options(config)


def test_a_refusal_names_the_acl_to_grant() -> None:
    needs = "WRITE on Topic orders_out, READ on Group eosbatch.orders"
    assert missing_acl(KafkaError.TOPIC_AUTHORIZATION_FAILED, needs) == f"; the principal needs {needs}"
    assert missing_acl(KafkaError.CLUSTER_AUTHORIZATION_FAILED, needs) == "; the principal lacks a Cluster ACL"
    assert missing_acl(KafkaError._TIMED_OUT, needs) == ""
