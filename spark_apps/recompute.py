"""spark-submit entry point of the verifier's recompute: `recompute.py PIPELINE RESULT_JSON`.

A thin shell over eosbatch.spark.recompute. Exit codes: 0 done, 2 terminal error, 3 transient error.
"""

import sys

from eosbatch.exceptions import TerminalError, TransientError
from eosbatch.spark.recompute import recompute


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: recompute.py PIPELINE RESULT_JSON", file=sys.stderr)
        return 2
    try:
        recompute(sys.argv[1], sys.argv[2])
    except TerminalError as exc:
        print(f"eosbatch: terminal: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except TransientError as exc:
        print(f"eosbatch: transient: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
