from eosbatch.exceptions import TerminalError, TransientError


class KafkaUnavailable(TransientError):
    """The broker did not answer in time or a retriable error persisted."""


class PublisherFenced(TerminalError):
    """A newer publisher with the same transactional.id took over; this runner must stop."""


class PublishFailed(TerminalError):
    """A fatal producer error; nothing of this attempt is visible to read_committed consumers."""


class TopicMissing(TerminalError):
    pass
