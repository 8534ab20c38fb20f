"""Fault injection for the crash tests: `EOSBATCH_FAULT=<point>` ends the process at that point with
os._exit, a real process death that no cleanup code, finally block or atexit hook can soften."""

from __future__ import annotations

import os
import sys

FAULT = "EOSBATCH_FAULT"
EXIT_CODE = 86

POINTS = (
    "plan.after_commit",          # batch planned, nothing processed
    "process.mid_staging",        # a Spark task dies after writing its rows (first attempt only)
    "process.before_staged",      # staging written, batch still planned
    "process.after_staged",       # batch staged, not committed
    "commit.before_commit",       # the commit transaction is built but COMMIT is never sent
    "commit.after_commit",        # COMMIT reached PostgreSQL, the runner dies before it hears back
    "publish.mid_produce",        # inside the Kafka transaction, records produced, not committed
    "publish.after_kafka_commit", # Kafka committed, ledger not finalized
)


_hits: dict[str, int] = {}


def point(name: str) -> None:
    """Die here if EOSBATCH_FAULT names this point: `<point>` on its first pass, `<point>@N` on the Nth
    pass in this process (a backfill killed halfway, after some batches finished)."""
    wanted, _, nth = os.environ.get(FAULT, "").partition("@")
    if wanted != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= int(nth or 1):
        die(name if not nth else f"{name} (pass {_hits[name]})")


def die(where: str) -> None:
    print(f"eosbatch: fault injected at {where}", file=sys.stderr, flush=True)
    os._exit(EXIT_CODE)
