"""What every spark-submit app under spark_apps/ does around its work: the exit code that tells the runner
what happened, and (with EOSBATCH_SPARK_RESULT set) a JSON result file with the error's one line or the
work's return value, so that the runner never scrapes Spark's log."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from eosbatch import config
from eosbatch.engine.errors import map_spark_error
from eosbatch.exceptions import Fenced, TerminalError

EXIT_TERMINAL, EXIT_TRANSIENT, EXIT_FENCED = 2, 3, 4
RESULT_FILE = "EOSBATCH_SPARK_RESULT"


def _write_result(result: dict[str, Any]) -> None:
    path = os.environ.get(RESULT_FILE)
    if path:
        with open(path, "w") as out:
            json.dump(result, out, default=str)


def main(work: Callable[..., object], usage: str, arity: int) -> int:
    """Run `work(*argv)`: 0 done, 2 terminal error (do not retry), 3 transient (a retry may succeed),
    4 fenced (another runner owns the batch's lane now: not a failure, that runner finishes the work)."""
    args = sys.argv[1:]
    if len(args) != arity:
        print(f"usage: {usage}", file=sys.stderr)
        return EXIT_TERMINAL
    try:
        value = work(*args)
    except Exception as exc:  # noqa: BLE001 - every failure leaves as one line and an exit code
        # The driver's settings came through its environment (engine/submit.py): that is its edge.
        error = map_spark_error(exc, usage.split()[0], os.environ.get(config.DATABASE_URL, ""))
        kind, code = (("fenced", EXIT_FENCED) if isinstance(error, Fenced) else
                      ("terminal", EXIT_TERMINAL) if isinstance(error, TerminalError) else
                      ("transient", EXIT_TRANSIENT))
        line = f"{type(error).__name__}: {error}"
        print(f"eosbatch: {kind}: {line}", file=sys.stderr)
        _write_result({"status": kind, "message": line})
        return code
    _write_result({"status": "done", "value": value})
    return 0
