from eosbatch.exceptions import TerminalError, TransientError


class LedgerUnavailable(TransientError):
    """PostgreSQL could not be reached or dropped the connection."""


class StaleEpoch(TerminalError):
    """Another runner took over the pipeline (its plan bumped the epoch); this one must stop."""


class OffsetMismatch(TerminalError):
    """The ledger's next offsets moved since the batch was planned: a duplicate or zombie run. The batch is
    aborted and its ranges are planned again."""


class RangeConflict(TerminalError):
    """A range overlaps one already committed (the exclusion constraint refused it)."""


class SinkError(TerminalError):
    """The sink table cannot take the transform's rows (schema, key, duplicate keys)."""


class BatchNotFound(TerminalError):
    pass


class LaneBusy(TransientError):
    """Another runner holds the lane's lease and keeps renewing it: this runner leaves the lane (and its
    epoch) alone; trying again later succeeds once the holder releases the lease or stops renewing it."""


class LaneLost(StaleEpoch):
    """This runner's lease was taken over (it stopped renewing in time: frozen, or cut off from the ledger):
    the new holder bumped the epoch and recovered the lane; this runner must stop."""
