"""Ambiguous transaction outcomes (issue 37, item 3), without a broker: which errors leave a transaction's outcome
unknown (a pure function), and what the publisher does then: its producer is never called again (no retry, no
abort), and the next publisher starts with a new producer whose init_transactions runs before anything else."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from eosbatch import config
from eosbatch.kafka import publisher
from eosbatch.kafka.errors import is_ambiguous
from eosbatch.kafka.exceptions import KafkaUnavailable, PublisherFenced, TransactionOutcomeUnknown

pytestmark = pytest.mark.unit

SETTINGS = config.Settings("postgresql://eosbatch@127.0.0.1:1/eosbatch", "127.0.0.1:1", {}, "local[1]")


@pytest.mark.parametrize(("error", "ambiguous"), [
    (KafkaError(KafkaError._TIMED_OUT), True),                       # commit_transaction(timeout) ran out
    (KafkaError(KafkaError._TIMED_OUT, retriable=True), True),
    (KafkaError(KafkaError._TRANSPORT), True),                       # the connection was lost
    (KafkaError(KafkaError._MSG_TIMED_OUT), True),                   # a record's delivery: unknown
    (KafkaError(KafkaError.REQUEST_TIMED_OUT), True),
    (KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, retriable=True), True),  # any retriable error
    (KafkaError(KafkaError._TIMED_OUT, txn_requires_abort=True), False),  # the transaction did not commit
    (KafkaError(KafkaError._FATAL, fatal=True), False),             # done for good, not unknown
    (KafkaError(KafkaError._FENCED, fatal=True), False),
    (KafkaError(KafkaError.PRODUCER_FENCED), False),
    (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), False),     # refused: known
    (KafkaError(KafkaError._STATE), False),                         # a misuse, not a lost answer
    (None, False),
], ids=lambda v: v.name() if isinstance(v, KafkaError) else str(v))
def test_which_errors_leave_a_transactions_outcome_unknown(error: KafkaError | None, ambiguous: bool) -> None:
    assert is_ambiguous(error) is ambiguous


class FakeProducer:
    """Records every call, in one list shared by all fakes; `fail` maps a method to the KafkaError it raises."""

    made = 0

    def __init__(self, calls: list[str], fail: dict[str, KafkaError], conf: dict[str, Any]) -> None:
        FakeProducer.made += 1
        self.name = f"p{FakeProducer.made}"
        self.calls, self.fail, self.conf = calls, fail, conf

    def _call(self, method: str) -> None:
        self.calls.append(f"{self.name}.{method}")
        if method in self.fail:
            raise KafkaException(self.fail[method])

    def init_transactions(self, _timeout: float) -> None:
        self._call("init_transactions")

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def produce(self, *_args: Any, **_kwargs: Any) -> None:
        self._call("produce")

    def poll(self, _timeout: float) -> int:
        return 0

    def flush(self, _timeout: float) -> int:
        self._call("flush")
        return 0

    def commit_transaction(self, _timeout: float) -> None:
        self._call("commit_transaction")

    def abort_transaction(self, _timeout: float) -> None:
        self._call("abort_transaction")

    def purge(self, **_kwargs: Any) -> None:
        self._call("purge")


@pytest.fixture
def producers(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[FakeProducer], dict[str, KafkaError]]:
    calls: list[str] = []
    made: list[FakeProducer] = []
    fail: dict[str, KafkaError] = {}
    FakeProducer.made = 0

    def producer(_settings: config.Settings, **conf: Any) -> FakeProducer:
        made.append(FakeProducer(calls, dict(fail), conf))
        fail.clear()  # a failure is the first producer's only
        return made[-1]

    monkeypatch.setattr(publisher.clients, "producer", producer)
    monkeypatch.setattr(publisher, "_kept", {})
    return calls, made, fail


def _one_transaction(tid: str = "t") -> publisher.TxnState:
    with publisher.publishing(SETTINGS, tid, owner="batch 1") as pub:
        pub.begin()
        pub.produce("out", [(b"k", b"v")], [])
        try:
            pub.commit_records()
        finally:
            state = pub.state
    return state


def test_a_commit_that_timed_out_abandons_its_producer_and_the_next_one_inits_first(producers) -> None:
    calls, _, fail = producers
    fail["commit_transaction"] = KafkaError(KafkaError._TIMED_OUT, retriable=True)
    with pytest.raises(TransactionOutcomeUnknown, match="commit_transaction: outcome unknown"):
        _one_transaction()
    # no second EndTxn on it: neither a retried commit nor an abort; its queue purged locally, nothing sent
    assert calls == ["p1.init_transactions", "p1.begin_transaction", "p1.produce", "p1.flush",
                     "p1.commit_transaction", "p1.purge"]
    with publisher.publishing(SETTINGS, "t", owner="batch 1") as pub:
        calls.append("marker read")  # what the publish step does first inside: after the new producer's init
        assert pub.state is publisher.TxnState.READY
    assert calls[6:] == ["p2.init_transactions", "marker read"]


def test_an_ambiguous_produce_abandons_the_producer_too(producers) -> None:
    calls, made, fail = producers
    fail["flush"] = KafkaError(KafkaError._TRANSPORT)
    with pytest.raises(TransactionOutcomeUnknown, match="producing to out: outcome unknown"):
        _one_transaction()
    assert "p1.abort_transaction" not in calls and calls[-1] == "p1.purge" and len(made) == 1


def test_an_error_that_settles_the_outcome_is_not_ambiguous(producers) -> None:
    calls, _, fail = producers
    fail["commit_transaction"] = KafkaError(KafkaError._FENCED, fatal=True)
    with pytest.raises(PublisherFenced):
        _one_transaction()
    fail["commit_transaction"] = KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, txn_requires_abort=True)
    with pytest.raises(KafkaUnavailable) as raised:
        _one_transaction()
    assert not isinstance(raised.value, TransactionOutcomeUnknown)
    assert "p2.abort_transaction" in calls  # abortable: the broker refused it, so the abort is no guess


def test_a_producer_is_kept_for_the_next_batch_only_if_librdkafka_reported_nothing(producers) -> None:
    _, made, _ = producers
    assert _one_transaction() is publisher.TxnState.READY
    assert _one_transaction() is publisher.TxnState.READY
    assert len(made) == 1  # clean: the next batch reuses it
    made[0].conf["error_cb"](KafkaError(KafkaError._TRANSPORT))  # a connection lost (and maybe a request resent)
    assert _one_transaction() is publisher.TxnState.READY
    _one_transaction()
    assert len(made) == 2  # not kept after the transaction under which librdkafka reported it
