"""What every spark-submit app under spark_apps/ does around its work: one line per error on stderr (the
runner reads the last `eosbatch: ` line) and the exit code that tells the runner what happened."""

from __future__ import annotations

import sys
from collections.abc import Callable

from eosbatch.exceptions import Fenced, TerminalError, TransientError

EXIT_TERMINAL, EXIT_TRANSIENT, EXIT_FENCED = 2, 3, 4


def main(work: Callable[..., object], usage: str, arity: int) -> int:
    """Run `work(*argv)`: 0 done, 2 terminal error (do not retry), 3 transient (a retry may succeed),
    4 fenced (another runner owns the batch's lane now: not a failure, that runner finishes the work)."""
    args = sys.argv[1:]
    if len(args) != arity:
        print(f"usage: {usage}", file=sys.stderr)
        return EXIT_TERMINAL
    try:
        work(*args)
    except Fenced as exc:
        print(f"eosbatch: fenced: {exc}", file=sys.stderr)
        return EXIT_FENCED
    except TerminalError as exc:
        print(f"eosbatch: terminal: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_TERMINAL
    except TransientError as exc:
        print(f"eosbatch: transient: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_TRANSIENT
    return 0
