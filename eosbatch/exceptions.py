"""The two kinds of failure every eosbatch error belongs to.

Retrying only makes sense for errors that can succeed next time, so each subpackage's errors derive
from one of these two; Airflow tasks and the CLI map them to "retry" and "fail for good".
"""


class EosbatchError(Exception):
    """Base of every eosbatch error."""


class TerminalError(EosbatchError):
    """Retrying cannot help: bad configuration, bad data, a lost race that needs a new plan."""


class TransientError(EosbatchError):
    """The same call may succeed later: a broker restart, a dropped connection, a timeout."""


class Fenced(TerminalError):
    """Another runner owns the pipeline's lane or the batch now (a newer epoch, a newer Kafka producer);
    this one stops and changes nothing. Not a failure of the work: the other runner finishes it. The CLI
    exits with its own code (4), so that a scheduler can tell it from a real failure."""


class ConfigError(TerminalError):
    """A setting or a definition is invalid; the message names the field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
