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


def point(name: str) -> None:
    if os.environ.get(FAULT) == name:
        die(name)


def die(where: str) -> None:
    print(f"eosbatch: fault injected at {where}", file=sys.stderr, flush=True)
    os._exit(EXIT_CODE)
