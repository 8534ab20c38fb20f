"""librdkafka's errors mapped to eosbatch's terminal and transient errors, where they enter (pure functions).

Nothing above eosbatch.kafka sees a KafkaException: a caller (the CLI, an Airflow task) only has to tell
"retry" from "stop", and the operator needs one line naming the address, the batch or the setting.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from eosbatch.config import TRANSACTION_TIMEOUT
from eosbatch.exceptions import EosbatchError
from eosbatch.kafka.exceptions import (
    KafkaAccessDenied,
    KafkaUnavailable,
    PublisherFenced,
    PublishFailed,
    RecordTooLarge,
    TopicMissing,
    TransactionTimeoutTooHigh,
)

# The broker refused this producer's epoch: a newer producer with the same transactional.id took over.
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})
# No broker answered (refused, unresolvable, silent): the address or the network, not the request.
UNREACHABLE = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                         KafkaError._RESOLVE, KafkaError.NETWORK_EXCEPTION, KafkaError.REQUEST_TIMED_OUT,
                         KafkaError._MSG_TIMED_OUT, KafkaError._WAIT_COORD, KafkaError.COORDINATOR_NOT_AVAILABLE,
                         KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS})
# Credentials or ACLs: the same request fails the same way until an operator changes them.
DENIED = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                    KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION, KafkaError._SSL})
# The ACL resource a refusal is about, by its code: what the message tells the operator to grant.
ACL_RESOURCE = {KafkaError.TOPIC_AUTHORIZATION_FAILED: "Topic", KafkaError.GROUP_AUTHORIZATION_FAILED: "Group",
                KafkaError.CLUSTER_AUTHORIZATION_FAILED: "Cluster",
                KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalId"}
AUTHENTICATION = frozenset({KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION})
TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
MISSING = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION})
# A request that may have taken effect although no answer said so: no answer in time, or the connection lost
# after it was sent. (librdkafka flags most of them retriable; these are ambiguous even where it does not.)
NO_ANSWER = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._MSG_TIMED_OUT,
                       KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION, KafkaError._ALL_BROKERS_DOWN,
                       KafkaError._TIMED_OUT_QUEUE, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.NOT_COORDINATOR, KafkaError._WAIT_COORD})


def error_of(exc: BaseException) -> KafkaError | None:
    """The KafkaError a KafkaException carries (its first argument), if any."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def describe(error: KafkaError | None, exc: BaseException | None = None) -> str:
    """One line: librdkafka's reason and the code's name (the repr is long and repeats both)."""
    if error is None:
        return str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else type(exc).__name__
    return f"{error.str()} ({error.name()})"


def is_fenced(error: KafkaError) -> bool:
    """Fenced, also when librdkafka reports it as a generic fatal error (`_FATAL`) whose text says why."""
    if error.code() in FENCED:
        return True
    return error.code() == KafkaError._FATAL and "fenced" in error.str().lower()


def is_ambiguous(error: KafkaError | None) -> bool:
    """Whether a transactional call (commit_transaction, abort_transaction, send_offsets_to_transaction, or a
    produce or flush inside a transaction) failed with an outcome nobody knows: the broker may have acted on
    it. True for no answer (NO_ANSWER) and for any retriable error, except a fatal or fenced producer, and
    an error that says the transaction must be aborted (txn_requires_abort: the broker refused it, so the
    outcome is known: it did not commit). Such a producer is never called again: a retry or an abort on it
    is a second EndTxn of the same epoch, which the broker may take after the first (Jepsen, Kafka 2024)."""
    if error is None or error.fatal() or is_fenced(error) or error.code() == KafkaError._FATAL:
        return False
    if error.txn_requires_abort():
        return False
    return error.code() in NO_ANSWER or error.retriable()


def missing_acl(code: int, needs: str) -> str:
    """What to grant for an authorization refusal: the caller's `needs` (e.g. "WRITE on Topic orders_out")
    when it names the refused resource kind, else the kind alone."""
    kind = ACL_RESOURCE.get(code)
    if kind is None:
        return ""
    return f"; the principal needs {needs}" if kind in needs else f"; the principal lacks a {kind} ACL"


def to_eosbatch(exc: BaseException, doing: str, bootstrap: str, *, owner: str = "", needs: str = "",
                transaction_timeout_ms: int | None = None, broker_max_ms: int | None = None) -> EosbatchError:
    """The eosbatch error for a Kafka failure while `doing` something against `bootstrap`.

    `owner` names what a publisher works for (a batch, a transactional.id), first in the message;
    `transaction_timeout_ms` and `broker_max_ms` name both values when the broker refuses the timeout."""
    error = error_of(exc)
    reason = describe(error, exc)
    who = f"{owner}: " if owner else ""  # the batch a publisher works for, first: the operator looks it up
    if error is None:
        return KafkaUnavailable(f"{who}kafka at {bootstrap}: {doing}: {reason}")
    code = error.code()
    if is_fenced(error):
        return PublisherFenced(f"{who}another runner owns it now: a newer publisher with the same "
                               f"transactional.id took over while this one was {doing}; this runner stops "
                               f"({reason})")
    if code == KafkaError.INVALID_TRANSACTION_TIMEOUT:
        mine = f"{transaction_timeout_ms} ms" if transaction_timeout_ms is not None else "the configured value"
        theirs = (f"{broker_max_ms} ms" if broker_max_ms is not None
                  else "the broker's maximum (it could not be read)")
        return TransactionTimeoutTooHigh(
            TRANSACTION_TIMEOUT, f"{mine} is above the broker's transaction.max.timeout.ms ({theirs}); lower "
                                 f"{TRANSACTION_TIMEOUT} or raise the broker's transaction.max.timeout.ms")
    if code in AUTHENTICATION:
        return KafkaAccessDenied(f"{who}kafka at {bootstrap}: {doing}: authentication failed ({reason}); check "
                                 "sasl.username and sasl.password in EOSBATCH_KAFKA_CONFIG")
    if code in DENIED:
        return KafkaAccessDenied(f"{who}kafka at {bootstrap}: {doing}: access denied ({reason})"
                                 f"{missing_acl(code, needs)}; check the credentials in EOSBATCH_KAFKA_CONFIG "
                                 "and the ACLs")
    if code in TOO_LARGE:
        return RecordTooLarge(f"{who}kafka at {bootstrap}: {doing}: a record is larger than the broker or topic "
                              f"accepts ({reason}); see max.message.bytes")
    if code in MISSING:
        return TopicMissing(f"{who}kafka at {bootstrap}: {doing}: {reason}")
    if code in UNREACHABLE:
        return KafkaUnavailable(f"{who}kafka at {bootstrap}: {doing}: no answer ({reason})")
    if error.fatal() or code == KafkaError._FATAL:  # produce() reports _FATAL without the fatal flag
        return PublishFailed(f"{who}kafka at {bootstrap}: {doing}: fatal: {reason}")
    # Retriable, abortable or unknown: the same call may succeed later (what eosbatch always assumed).
    return KafkaUnavailable(f"{who}kafka at {bootstrap}: {doing}: {reason}")
