from eosbatch.exceptions import TerminalError, TransientError


class KafkaUnavailable(TransientError):
    """The broker did not answer in time or a retriable error persisted."""


class PublisherFenced(TerminalError):
    """A newer publisher with the same transactional.id took over; this runner must stop."""


class PublishFailed(TerminalError):
    """A fatal producer error; nothing of this attempt is visible to read_committed consumers."""


class MarkerExpired(TerminalError):
    """A committed batch's marker is absent and older than the marker group's offset retention: whether its
    output was published cannot be told from Kafka any more, so the operator decides (never a blind republish)."""


class TopicMissing(TerminalError):
    pass


class TopicChanging(TransientError):
    """A source topic's ID changed while a plan read its offsets (deleted and recreated meanwhile): the
    offsets read may belong to either topic, so nothing is planned; the next plan sees which one is there."""
