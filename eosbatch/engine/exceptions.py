from eosbatch.exceptions import TerminalError, TransientError


class EngineUnavailable(TransientError):
    """The Spark engine could not be reached or died mid-batch (a Connect server restarting, a lost driver):
    the batch is aborted and planned again; nothing it staged counts."""


class SparkJobFailed(TransientError):
    """A Spark job failed (a task ran out of attempts, an executor was lost, PostgreSQL went away during
    staging): retrying the batch may succeed."""


class TransformError(TerminalError):
    """The pipeline's transform or reader is invalid for this data (analysis error): fix the pipeline."""
