from eosbatch.exceptions import Fenced, TerminalError, TransientError


class LedgerUnavailable(TransientError):
    """PostgreSQL could not be reached or dropped the connection."""


class LedgerAccessDenied(TerminalError):
    """PostgreSQL refused the login or a privilege: retrying cannot help until an operator changes them."""


class LedgerSchemaMissing(TerminalError):
    """The database has no eosbatch ledger, or an older revision of it: `eosbatch db upgrade` creates or
    upgrades it (or, for a revision newer than this eosbatch knows, upgrade eosbatch)."""


class StaleEpoch(Fenced):
    """Another runner took over the pipeline (its plan bumped the epoch); this one must stop."""


class OffsetMismatch(TerminalError):
    """The ledger's next offsets moved since the batch was planned: a duplicate or zombie run. The batch is
    aborted and its ranges are planned again."""


class RangeConflict(TerminalError):
    """A range overlaps one already committed (the exclusion constraint refused it)."""


class StagingLost(TransientError):
    """A staged batch's rows are not all in staging any more (PostgreSQL restarted: staging is unlogged). The
    batch is aborted without moving anything; running again plans the same ranges again."""


class NotStaged(TerminalError):
    """Only a staged batch can be committed (an aborted one is planned again by the next run)."""


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
