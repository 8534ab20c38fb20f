"""The transactional publisher: one Kafka transaction per batch, fenced by a stable transactional.id.

The producer is created lazily (on first use), never in __init__, so building a publisher is free and
cannot fail; and its transaction is a small state machine whose methods check the state first.
"""

from __future__ import annotations

import contextlib
import enum
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import ConfigResource, ResourceType

from eosbatch import faults
from eosbatch.config import Settings
from eosbatch.exceptions import EosbatchError
from eosbatch.kafka import clients, marker, watchdog
from eosbatch.kafka.errors import DENIED, describe, error_of, is_ambiguous, is_fenced, to_eosbatch
from eosbatch.kafka.exceptions import KafkaUnavailable, PublishFailed, TransactionOutcomeUnknown
from eosbatch.kafka.record import Headers
from eosbatch.protocol.ranges import OffsetRange


class TxnState(enum.Enum):
    NEW = "new"              # producer not created yet
    READY = "ready"          # init_transactions() done: older publishers fenced, their transactions settled
    IN_TXN = "in_txn"
    FAILED = "failed"        # fatal or fenced: this publisher is done for good
    # A transactional call's outcome is unknown (errors.is_ambiguous): the producer is never called again, not
    # even to abort (a second EndTxn of the same epoch could land after the first). close() drops it; a new
    # producer's init_transactions settles the transaction, and the marker tells what became of it.
    AMBIGUOUS = "ambiguous"


# The publisher's defaults that EOSBATCH_KAFKA_CONFIG may change. No compression.type: on a broker next door
# lz4 cost CPU for nothing (2 overlapped batches of 500k, alternating, 3 each: 14.39-16.12 s and 25.4-28.4
# CPU-s without it, 15.02-17.08 s and 26.3-30.4 CPU-s with it); across a slow link, set one there.
PRODUCER_TUNING: dict[str, Any] = {"linger.ms": 20, "queue.buffering.max.messages": 200_000}


class TransactionalPublisher:
    def __init__(self, settings: Settings, transactional_id: str, transaction_timeout_ms: int | None = None,
                 owner: str = "") -> None:
        """`owner` names what this publisher works for (e.g. "batch 7 of pipeline 'x'"), for error messages;
        the transaction timeout defaults to the setting (EOSBATCH_TRANSACTION_TIMEOUT_MS)."""
        self._settings = settings
        self._transactional_id = transactional_id
        self._timeout_ms = settings.transaction_timeout_ms if transaction_timeout_ms is None else transaction_timeout_ms
        self._call_timeout = settings.transaction_call_timeout_s  # a call's wait; past it the outcome is unknown
        self.owner = owner or f"transactional.id {transactional_id}"
        self._producer: Producer | None = None
        self.state = TxnState.NEW
        self.produced = 0
        self._undelivered: KafkaError | None = None  # the first record the broker refused in this transaction
        self._trouble: KafkaError | None = None  # the first error librdkafka reported by itself since init
        self._topic = ""  # where this transaction produced
        self.attempt = ""  # this transaction's own id, new at each begin: "<transactional id>/<uuid>"

    def _require(self, *states: TxnState) -> None:
        if self.state not in states:
            raise PublishFailed(f"publisher is {self.state.value}; expected {'/'.join(s.value for s in states)}")

    def _fail(self, exc: KafkaException, doing: str, needs: str = "") -> Exception:
        """The eosbatch error for a failed producer call; a fatal or fenced producer is done for good."""
        error = error_of(exc)
        if self.state is TxnState.IN_TXN and is_ambiguous(error):
            self.state = TxnState.AMBIGUOUS
            return TransactionOutcomeUnknown(
                f"{self.owner}: kafka at {self._settings.kafka_bootstrap}: {doing}: outcome unknown "
                f"({describe(error, exc)}); this producer is abandoned, a new one's init_transactions settles "
                "the transaction")
        if error is not None and error.code() == KafkaError._FATAL and not is_fenced(error):
            # produce() says only "Local: Fatal error"; the transactional API returns the stored cause
            # (e.g. _FENCED when a newer runner took over while this one was frozen).
            exc = self._fatal_cause() or exc
            error = error_of(exc)
        if error is not None and (error.fatal() or is_fenced(error) or error.code() == KafkaError._FATAL):
            self.state = TxnState.FAILED
        broker_max = None
        if error is not None and error.code() == KafkaError.INVALID_TRANSACTION_TIMEOUT:
            broker_max = self._broker_max_timeout_ms()
        return to_eosbatch(exc, doing, self._settings.kafka_bootstrap, owner=self.owner,
                           needs=needs or f"WRITE and DESCRIBE on TransactionalId {self._transactional_id}",
                           transaction_timeout_ms=self._timeout_ms, broker_max_ms=broker_max)

    def _delivery_failed(self, error: KafkaError | None, _message: Any) -> None:
        # A purged queue is a consequence (the transaction failed, e.g. no WRITE on the topic): the cause
        # comes with commit_transaction.
        if error is not None and self._undelivered is None and error.code() != KafkaError._PURGE_QUEUE:
            self._undelivered = error

    def _noticed(self, error: KafkaError) -> None:
        # error_cb: a lost connection, a request timed out, all brokers down... librdkafka may then have sent a
        # request again on a new connection, and the first copy may still land (see reusable).
        if self._trouble is None:
            self._trouble = error

    def reusable(self) -> bool:
        """READY, and librdkafka reported no error by itself since init_transactions (error_cb, served here).

        The guard of keeping a producer for the next batch: an EndTxn that librdkafka sent again over a new
        connection, its first copy landing late, could decide the next transaction of the same epoch (Jepsen,
        Kafka 2024). Such a retry follows a lost connection or a timed-out request, which librdkafka reports;
        after one, the next batch starts with a new producer and init_transactions (a new epoch), as after
        any failure."""
        if self.state is not TxnState.READY or self._producer is None:
            return False
        self._producer.poll(0)
        return self._trouble is None

    def _fatal_cause(self) -> KafkaException | None:
        if self._producer is None:
            return None
        try:
            self._producer.abort_transaction(1)  # refused at once by a fatal producer, with the cause
        except KafkaException as cause:
            return cause
        return None

    def _broker_max_timeout_ms(self) -> int | None:
        """The broker's transaction.max.timeout.ms, to name it; None when it cannot be read (ACLs, timeout)."""
        try:
            client = clients.admin(self._settings)
            cluster = client.describe_cluster(request_timeout=10).result(timeout=15)
            resource = ConfigResource(ResourceType.BROKER, str(cluster.nodes[0].id))
            found = client.describe_configs([resource], request_timeout=10)[resource].result(timeout=15)
            return int(found["transaction.max.timeout.ms"].value)
        except Exception:  # noqa: BLE001 - only to improve a message; the error names "the broker's maximum"
            return None

    def producer_overrides(self) -> dict[str, Any]:
        """The transactional producer's settings over the user's (EOSBATCH_KAFKA_CONFIG): what exactly-once
        needs and what only this producer knows, plus PRODUCER_TUNING where the user set none of it."""
        tuning = {k: v for k, v in PRODUCER_TUNING.items() if k not in self._settings.kafka_config}
        return {
            **tuning,
            "transactional.id": self._transactional_id,
            "enable.idempotence": True,
            "acks": "all",
            # murmur2 keeps keys on the partitions Java clients would pick.
            "partitioner": "murmur2_random",
            "transaction.timeout.ms": self._timeout_ms,
            # A refused record (too large for the topic, no write permission) would otherwise only show as
            # "commit_transaction: abort and retry", for ever; only failures call back, so no cost per record.
            "on_delivery": self._delivery_failed,
            "delivery.report.only.error": True,
            "error_cb": self._noticed,
        }

    def init(self) -> None:
        """Fence older publishers of this transactional.id and settle whatever they left open."""
        self._require(TxnState.NEW)
        self._producer = clients.producer(self._settings, **self.producer_overrides())
        try:
            with watchdog.bounded("init_transactions", self._call_timeout, self.owner):
                self._producer.init_transactions(self._call_timeout)
        except KafkaException as exc:
            raise self._fail(exc, "init_transactions") from exc
        self.state = TxnState.READY

    def begin(self) -> None:
        self._require(TxnState.READY)
        assert self._producer is not None
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise self._fail(exc, "begin_transaction") from exc
        self.attempt = f"{self._transactional_id}/{uuid.uuid4().hex}"
        self._undelivered = None
        self.state = TxnState.IN_TXN

    def produce(self, topic: str, records: Iterable[tuple[bytes | None, bytes | None]
                                                    | tuple[bytes | None, bytes | None, Headers]],
                headers: Headers) -> int:
        """Produce `records` ((key, value) or (key, value, their own headers)), each with `headers` too; a
        None value is a tombstone (a sink's delete).
        With `headers` empty a record's own list is passed as it is: header lists are most of the Python
        time a million records take, and a copy each adds ~6 % of publish's CPU."""
        self._require(TxnState.IN_TXN)
        producer = self._producer
        assert producer is not None
        count = 0
        try:
            for record in records:
                key, value = record[0], record[1]
                if len(record) > 2:
                    own: Headers = record[2]  # type: ignore[misc]
                    record_headers = [*headers, *own] if headers else own
                else:
                    record_headers = headers
                while True:
                    try:
                        producer.produce(topic, value, key, headers=record_headers)
                        break
                    except BufferError:
                        producer.poll(0.05)  # the local queue is full: let deliveries drain (bounded memory)
                count += 1
                if count % 10_000 == 0:
                    producer.poll(0)
            # Flushed so that a crash here leaves real records of an open transaction in the topic.
            producer.flush(self._call_timeout)
        except KafkaException as exc:
            # A runner frozen here and fenced meanwhile learns it now (produce, poll or flush refuse).
            raise self._fail(exc, f"producing to {topic}", f"WRITE on Topic {topic}") from exc
        if self._undelivered is not None:  # the transaction cannot commit: say why, not "retry"
            raise self._fail(KafkaException(self._undelivered), f"producing to {topic}", f"WRITE on Topic {topic}")
        self._topic = topic
        faults.point("publish.mid_produce")
        self.produced += count
        return count

    def commit(self, settings: Settings, group: str, ranges: list[OffsetRange], metadata: str = "") -> None:
        """Send the marker offsets and commit: the output and the marker become visible together."""
        self._require(TxnState.IN_TXN)
        producer = self._producer
        assert producer is not None
        group_metadata = marker.consumer(settings, group).consumer_group_metadata()
        offsets = marker.offsets_for(ranges, metadata)

        def send_marker() -> None:
            with watchdog.bounded("send_offsets_to_transaction", self._call_timeout, self.owner):
                producer.send_offsets_to_transaction(offsets, group_metadata, self._call_timeout)

        self._commit(send_marker, group)

    def commit_records(self) -> None:
        """Commit the records produced in this transaction, with no marker (`eosbatch produce`)."""
        self._require(TxnState.IN_TXN)
        self._commit(None, None)

    def _commit(self, send_marker: Callable[[], None] | None, group: str | None) -> None:
        producer = self._producer
        assert producer is not None
        on_group = f", READ on Group {group}" if group else ""
        doing = "commit_transaction"
        try:
            if send_marker is not None:
                doing = "send_offsets_to_transaction (the marker)"
                send_marker()
                doing = "commit_transaction"
            faults.point("publish.before_end_txn")
            with watchdog.bounded("commit_transaction", self._call_timeout, self.owner):
                producer.commit_transaction(self._call_timeout)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.txn_requires_abort():
                refused = self._undelivered or (error if error.code() in DENIED else None)
                try:
                    self.abort()
                except EosbatchError:
                    if refused is None:
                        raise  # else the refusal is what the operator must read, not the failed abort
                if refused is not None:  # a record or the transaction was refused: retrying refuses it again
                    raise self._fail(KafkaException(refused), f"producing to {self._topic}",
                                     f"WRITE on Topic {self._topic}{on_group}") from exc
                raise KafkaUnavailable(f"{self.owner}: commit_transaction: aborted, retry the publish: "
                                       f"{error.str()}") from exc
            marker_needs = f"READ on Group {group} (the marker) and " if group else ""
            raise self._fail(exc, doing, f"{marker_needs}WRITE on TransactionalId {self._transactional_id}") from exc
        self.state = TxnState.READY

    def abort(self) -> None:
        self._require(TxnState.IN_TXN)
        assert self._producer is not None
        try:
            with watchdog.bounded("abort_transaction", self._call_timeout, self.owner):
                self._producer.abort_transaction(self._call_timeout)
        except KafkaException as exc:
            raise self._fail(exc, "abort_transaction") from exc
        self.state = TxnState.READY

    def close(self) -> None:
        if self.state is TxnState.AMBIGUOUS:
            self._abandon()
            return
        if self._producer is not None and self.state is TxnState.IN_TXN:
            try:
                self.abort()
            except Exception:  # noqa: BLE001 - closing after a failure; the broker times the txn out anyway
                pass
        if self._producer is not None and self.state is not TxnState.FAILED:
            try:
                self._producer.flush(5)
            except KafkaException:
                pass  # a fenced or fatal producer has nothing left to deliver
        self._producer = None

    def _abandon(self) -> None:
        """Drop an AMBIGUOUS producer without a further request: its queued records are purged locally (they
        belong to a transaction that init_transactions will settle), and freeing it sends nothing."""
        producer, self._producer = self._producer, None
        if producer is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                producer.purge(in_queue=True, in_flight=True, blocking=False)

    def __enter__(self) -> TransactionalPublisher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_lock = threading.Lock()
_kept: dict[tuple[Any, ...], TransactionalPublisher] = {}
_inherited: list[Any] = []  # a forked child's copies of its parent's publishers: never used, never freed


def _after_fork() -> None:
    # Closing (or freeing) a parent's producer in a child would wait for threads the child lacks.
    _inherited.append(dict(_kept))
    _kept.clear()


os.register_at_fork(after_in_child=_after_fork)


@contextlib.contextmanager
def publishing(settings: Settings, transactional_id: str, owner: str) -> Iterator[TransactionalPublisher]:
    """A READY publisher of `transactional_id` for one batch's transaction.

    The one this process initialised for an earlier batch is reused while it is `reusable()`: READY (no
    transaction open; a newer producer of the same id has fenced it, which its next call reports) and no
    error reported by librdkafka since its init_transactions. The guard is against a late copy of an EndTxn
    that librdkafka resent over a new connection, which could decide the next transaction of the same epoch;
    a resend follows a lost connection or a timed-out request, which librdkafka reports. After any failure,
    and an AMBIGUOUS outcome above all, the publisher is closed: the next batch starts with a new producer and
    init_transactions, which settles what the old one left and bumps the epoch, before the marker is read.

    Kept rather than made anew per batch, measured on the embedded one-broker stack (bench/producer_init.py,
    issue 37): a new producer + init_transactions costs 60 ms median, 513 ms p95 over 50 (librdkafka waits
    500 ms before asking again while the coordinator still completes the previous transaction); in a run of
    10 batches of 100 records, 5 rounds, the publish step took 41 ms median (p95 159 ms) kept, 342 ms (p95
    606 ms) new per batch, and a batch 1.23 s against 1.48 s (+20 %); on one 300k-record batch the
    difference (2.6-6.3 s publish steps either way on 2 shared cores) is in the noise."""
    key = clients.kept_key(settings, transactional_id, settings.transaction_timeout_ms)
    with _lock:
        publisher = _kept.pop(key, None)
    if publisher is not None and publisher.state is TxnState.READY:
        publisher.owner = owner
    else:
        publisher = TransactionalPublisher(settings, transactional_id, owner=owner)
    kept = kept_already = False
    try:
        if publisher.state is TxnState.NEW:
            publisher.init()  # fences older publishers first: only now is the marker trustworthy
        yield publisher
        kept = publisher.reusable()
    finally:
        if kept:
            with _lock:
                kept_already = _kept.setdefault(key, publisher) is not publisher
        if not kept or kept_already:
            publisher.close()


def release() -> None:
    """Close the publishers kept by `publishing` (at the end of a run: their producers hold connections)."""
    with _lock:
        kept = list(_kept.values())
        _kept.clear()
    for publisher in kept:
        publisher.close()
