"""spark-submit entry point of the process step: `process_batch.py PIPELINE BATCH_ID`.

A thin shell over eosbatch.spark.app.process; exit codes as in eosbatch.spark.entry.
"""

import sys

from eosbatch.exceptions import ConfigError
from eosbatch.spark import entry
from eosbatch.spark.app import process


def _process(pipeline: str, batch_id: str) -> dict[str, int]:
    """The batch's counts, handed back to the runner (eosbatch.engine.submit), which logs them."""
    if not batch_id.isdigit():
        raise ConfigError("BATCH_ID", f"must be a batch id, got {batch_id!r}")
    return process(pipeline, int(batch_id))


if __name__ == "__main__":
    sys.exit(entry.main(_process, "process_batch.py PIPELINE BATCH_ID", 2))
