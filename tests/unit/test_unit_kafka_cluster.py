"""The embedded stack's Kafka cluster as configuration: ports, voters, replication, the single node unchanged."""

from __future__ import annotations

import pytest

from eosbatch import stack
from eosbatch.config import ConfigError
from eosbatch.stack.exceptions import StackError
from eosbatch.stack.kafka import _PROPERTIES, KafkaBroker, render
from eosbatch.stack.kafka_cluster import KafkaCluster, formatted_nodes, replication

pytestmark = pytest.mark.unit


def _rendered(node: KafkaBroker) -> dict[str, str]:
    text = render(_PROPERTIES.format(port=node.port, controller_port=node.controller_port, sasl_port=node.sasl_port,
                                     data="/d", node_id=node.node_id, voters=node.voters), node.overrides)
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith((" ", "#")))


def test_one_node_keeps_the_single_broker_settings(tmp_path) -> None:
    [node] = KafkaCluster(tmp_path, 19092).nodes
    found = _rendered(node)
    assert (node.home, node.port, KafkaCluster(tmp_path, 19092).bootstrap) == (tmp_path / "kafka", 19092,
                                                                               "127.0.0.1:19092")
    assert found["controller.quorum.voters"] == "1@127.0.0.1:19093" and found["node.id"] == "1"
    assert found["transaction.state.log.replication.factor"] == "1" and "min.insync.replicas" not in found
    assert replication(1) == {}


def test_three_nodes_replicate_three_times_with_two_in_sync(tmp_path) -> None:
    cluster = KafkaCluster(tmp_path, 19092, brokers=3, overrides={"broker.session.timeout.ms": "3000"})
    assert cluster.bootstrap == "127.0.0.1:19092,127.0.0.1:19095,127.0.0.1:19098"
    assert [n.home.name for n in cluster.nodes] == ["kafka", "kafka-2", "kafka-3"]
    third = _rendered(cluster.node(3))
    assert third["node.id"] == "3" and third["listeners"].startswith("PLAINTEXT://127.0.0.1:19098,")
    assert third["controller.quorum.voters"] == "1@127.0.0.1:19093,2@127.0.0.1:19096,3@127.0.0.1:19099"
    assert {k: third[k] for k in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                                  "default.replication.factor")} == dict.fromkeys(
        ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
         "default.replication.factor"), "3")
    assert third["transaction.state.log.min.isr"] == third["min.insync.replicas"] == "2"
    assert third["broker.session.timeout.ms"] == "3000"
    with pytest.raises(StackError, match="no node 4"):
        cluster.node(4)


def test_storage_formatted_for_another_number_of_nodes_is_refused(tmp_path) -> None:
    assert formatted_nodes(tmp_path) is None
    (tmp_path / "kafka" / "data").mkdir(parents=True)
    (tmp_path / "kafka" / "data" / "meta.properties").write_text("")
    assert formatted_nodes(tmp_path) == 1
    with pytest.raises(StackError, match="formatted for 1 node"):
        KafkaCluster(tmp_path, 19092, brokers=3).check_shape()
    (tmp_path / "kafka" / "nodes").write_text("3\n")
    assert KafkaCluster(tmp_path, 19092, brokers=3).check_shape() == 3


def test_the_number_of_brokers_comes_from_the_flag_the_setting_or_the_storage(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(stack.KAFKA_BROKERS, raising=False)
    assert stack.kafka_brokers(tmp_path) == 1
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "nodes").write_text("3\n")
    assert stack.kafka_brokers(tmp_path) == 3 and stack.kafka_brokers(tmp_path, 1) == 1
    monkeypatch.setenv(stack.KAFKA_BROKERS, "three")
    with pytest.raises(ConfigError, match="EOSBATCH_KAFKA_BROKERS"):
        stack.kafka_brokers(tmp_path)
