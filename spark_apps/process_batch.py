"""spark-submit entry point of the process step: `process_batch.py PIPELINE BATCH_ID`.

A thin shell: the work is eosbatch.spark.app.process. Exit codes: 0 done, 2 terminal error (do not
retry), 3 transient error (retry may succeed), 4 fenced (another runner owns the batch's lane now).
"""

import sys

from eosbatch.exceptions import Fenced, TerminalError, TransientError
from eosbatch.spark.app import process


def main() -> int:
    if len(sys.argv) != 3 or not sys.argv[2].isdigit():
        print("usage: process_batch.py PIPELINE BATCH_ID", file=sys.stderr)
        return 2
    try:
        process(sys.argv[1], int(sys.argv[2]))
    except Fenced as exc:  # not a failure: the runner that took over processes the batch again
        print(f"eosbatch: fenced: {exc}", file=sys.stderr)
        return 4
    except TerminalError as exc:
        print(f"eosbatch: terminal: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except TransientError as exc:
        print(f"eosbatch: transient: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
