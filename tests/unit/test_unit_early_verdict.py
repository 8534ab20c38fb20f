"""The early publish's verdict (eosbatch.protocol.early): every way the early transaction is kept or dropped."""

from __future__ import annotations

import pytest

from eosbatch.protocol.early import drop_reason, kafka_commit_failed, not_for_batch

pytestmark = pytest.mark.unit


def test_a_batch_committed_here_with_every_record_produced_and_its_sequence_commits() -> None:
    assert drop_reason(True, None, 10, 10, 7, 7) is None


def test_an_empty_batch_commits_too() -> None:
    assert drop_reason(True, None, 0, 0, 1, 1) is None


def test_a_commit_made_by_another_run_drops_it_whatever_else_holds() -> None:
    assert drop_reason(False, None, 10, 10, 7, 7) == "the commit was another run's"
    assert drop_reason(False, "KafkaError: down", 10, None, 8, 7) == "the commit was another run's"


def test_a_failed_produce_drops_it() -> None:
    assert drop_reason(True, "KafkaError: down", 10, None, 7, 7) == "producing failed (KafkaError: down)"


def test_another_count_drops_it() -> None:
    assert drop_reason(True, None, 9, 10, 7, 7) == "the outbox holds 9 records, 10 were produced"
    assert drop_reason(True, None, None, 10, 7, 7) == "the outbox holds None records, 10 were produced"


def test_another_sequence_number_drops_it() -> None:
    assert drop_reason(True, None, 10, 10, 8, 7) == "the commit took sequence #8, not #7"


def test_the_first_reason_found_is_the_one_given() -> None:
    assert drop_reason(True, "boom", 9, None, 8, 7) == "producing failed (boom)"
    assert drop_reason(True, None, 9, 10, 8, 7) == "the outbox holds 9 records, 10 were produced"


def test_a_failed_kafka_commit_is_named() -> None:
    assert kafka_commit_failed(RuntimeError("fenced?")) == "its Kafka commit failed (fenced?)"


def test_early_publish_is_for_regular_batches_while_it_is_on() -> None:
    assert not_for_batch(True, "regular") is None
    assert not_for_batch(True, "backfill") == "a backfill-lane batch: early publish is for the regular lane"
    assert not_for_batch(False, "regular") == "EOSBATCH_EARLY_PUBLISH is off"
