"""A transactional call that outlives its own timeout by far ends the process, so that the lane is freed.

librdkafka bounds init_transactions, send_offsets_to_transaction, commit_transaction and abort_transaction by
the timeout they are given (EOSBATCH_TRANSACTION_CALL_TIMEOUT_S), and the ambiguous-outcome rule relies on it:
past it the outcome is unknown, the producer is dropped, and a new one's init_transactions settles the
transaction before the marker is read. The soak of issue 37 saw one send_offsets_to_transaction block for more
than 8 minutes past a 60 s timeout (librdkafka issue 5456), while the run's lease heartbeat kept the lane held:
no other runner could take over, and nothing failed.

A call blocked in C cannot be interrupted from Python. So the watchdog ends the whole process, with the
transient exit code, once a call has run `limit_s(timeout)` seconds: the lease lapses, and the next run recovers
from the ledger and the marker as after any crash (tests/chaos kills the runner at every step).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

TRANSIENT_EXIT = 3  # eosbatch.cli_parser.EXIT_TRANSIENT: Airflow and the CLI's callers retry it
GRACE_S = 30.0


def limit_s(timeout_s: float) -> float:
    """How long a call with this timeout may run before the process ends: twice its timeout and 30 s more
    (librdkafka returns at the timeout; a late answer in flight is not a hang)."""
    return 2 * timeout_s + GRACE_S


@contextmanager
def bounded(call: str, timeout_s: float, owner: str, end: Callable[[int], object] = os._exit
            ) -> Iterator[None]:
    """Run the block (one transactional call given `timeout_s`); if it is still running after
    `limit_s(timeout_s)`, say so on stderr and end the process with the transient exit code (`end`)."""
    limit = limit_s(timeout_s)

    def overdue() -> None:
        print(f"eosbatch: {owner}: {call} still blocked after {limit:.0f}s, past its {timeout_s:.0f}s timeout "
              "(librdkafka); this process ends (transient): the lane's lease lapses and the next run's "
              "init_transactions settles the transaction", file=sys.stderr, flush=True)
        end(TRANSIENT_EXIT)

    timer = threading.Timer(limit, overdue)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
