from eosbatch.exceptions import ConfigError, Fenced, TerminalError, TransientError


class KafkaUnavailable(TransientError):
    """The broker did not answer in time or a retriable error persisted."""


class KafkaAccessDenied(TerminalError):
    """Authentication or authorization failed: retrying cannot help until an operator changes credentials/ACLs."""


class PublisherFenced(Fenced):
    """A newer publisher with the same transactional.id took over; this runner must stop."""


class PublishFailed(TerminalError):
    """A fatal producer error; nothing of this attempt is visible to read_committed consumers."""


class RecordTooLarge(PublishFailed):
    """A record is larger than the broker or the topic accepts (max.message.bytes, message.max.bytes)."""


class TransactionTimeoutTooHigh(ConfigError):
    """EOSBATCH_TRANSACTION_TIMEOUT_MS is above the broker's transaction.max.timeout.ms (init_transactions
    fails with INVALID_TRANSACTION_TIMEOUT); the message names both values."""


class MarkerExpired(TerminalError):
    """A committed batch's marker is absent and older than the marker group's offset retention: whether its
    output was published cannot be told from Kafka any more, so the operator decides (never a blind republish)."""


class TopicMissing(TerminalError):
    pass


class TopicChanging(TransientError):
    """A source topic's ID changed while a plan read its offsets (deleted and recreated meanwhile): the
    offsets read may belong to either topic, so nothing is planned; the next plan sees which one is there."""


class TopicExists(TerminalError):
    """`topic create` found the topic with another number of partitions than it was asked for."""


class TransactionOutcomeUnknown(KafkaUnavailable):
    """A transactional call (EndTxn, AddPartitionsToTxn, TxnOffsetCommit) got no definite answer: a timeout, a
    lost connection. Its producer is abandoned, never called again (no retry, no abort on it); a new producer's
    init_transactions settles the transaction, and only then does the marker tell whether it committed."""


class RangeUnreadable(TerminalError):
    """A planned range's records are no longer in the log (the log start moved past its start: retention),
    so the range cannot be read whole: a retry reads the same nothing."""
