from eosbatch.exceptions import TerminalError


class ProtocolError(TerminalError):
    """A request or a state that the protocol refuses."""


class IllegalTransition(ProtocolError):
    def __init__(self, batch_id: int, state: str, target: str) -> None:
        super().__init__(f"batch {batch_id} is {state}; it cannot become {target}")


class InvalidRange(ProtocolError):
    """An offset range that cannot be planned; the message names the partition and what exists."""


class SourceChanged(ProtocolError):
    """A source topic changed under the pipeline (recreated, retention past the next offset, a log that went
    back): nothing was planned; the message names topic, partition and offsets, and the reset that goes on."""


class LedgerBehindOutput(ProtocolError):
    """The regular lane's marker group is past everything the ledger holds (eosbatch.protocol.lost): the ledger's
    database lost batches Kafka published. Nothing was planned; `ranges` are the lost ones; the message names them
    and the way out (`eosbatch adopt-published`)."""

    def __init__(self, message: str, ranges: list) -> None:  # type: ignore[type-arg]
        super().__init__(message)
        self.ranges = ranges
