"""The transactional producer's settings: exactly-once's own always win; tuning is the user's to change."""

from __future__ import annotations

import json

import pytest

from eosbatch import config
from eosbatch.kafka import clients
from eosbatch.kafka.publisher import TransactionalPublisher

pytestmark = pytest.mark.unit


def _producer_config(user: dict[str, object]) -> dict[str, object]:
    settings = config.load({config.DATABASE_URL: "postgresql://u@127.0.0.1:5432/db",
                            config.KAFKA_BOOTSTRAP: "127.0.0.1:9092", config.KAFKA_CONFIG: json.dumps(user)})
    publisher = TransactionalPublisher(settings, "eosbatch.p", transaction_timeout_ms=60_000)
    return clients.config(settings, **publisher.producer_overrides())


def test_no_compression_unless_the_user_asks() -> None:
    assert "compression.type" not in _producer_config({})
    assert _producer_config({"compression.type": "zstd"})["compression.type"] == "zstd"


def test_tuning_is_the_users_and_exactly_once_is_ours() -> None:
    made = _producer_config({"linger.ms": 5, "queue.buffering.max.messages": 1000})
    assert (made["linger.ms"], made["queue.buffering.max.messages"]) == (5, 1000)
    assert (made["transactional.id"], made["enable.idempotence"], made["acks"]) == ("eosbatch.p", True, "all")
    assert made["transaction.timeout.ms"] == 60_000
    default = _producer_config({})
    assert (default["linger.ms"], default["queue.buffering.max.messages"]) == (20, 200_000)
