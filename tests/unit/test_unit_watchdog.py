"""The transactional-call watchdog (eosbatch/kafka/watchdog.py): a call still running long past its timeout
ends the process with the transient exit code, so the lane's lease lapses; a call that returns cancels it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from eosbatch.cli_parser import EXIT_TRANSIENT
from eosbatch.kafka import watchdog


def test_the_limit_is_twice_the_timeout_and_a_grace() -> None:
    assert watchdog.limit_s(60) == 150
    assert watchdog.limit_s(5) == 40
    assert watchdog.TRANSIENT_EXIT == EXIT_TRANSIENT  # Airflow and the CLI's callers retry it


def test_a_call_that_returns_in_time_ends_nothing_and_one_that_does_not_is_ended(monkeypatch) -> None:
    monkeypatch.setattr(watchdog, "GRACE_S", 0.05)
    ended: list[int] = []
    with watchdog.bounded("commit_transaction", 0.0, "batch 1", end=ended.append):
        pass  # returned at once: the timer is cancelled
    time.sleep(0.3)
    assert ended == []
    with watchdog.bounded("commit_transaction", 0.0, "batch 1", end=ended.append):
        time.sleep(0.3)  # past the 0.05 s limit
    assert ended == [watchdog.TRANSIENT_EXIT]


def test_a_blocked_call_ends_the_process_with_the_transient_code_naming_the_call() -> None:
    """In a process of its own, a call blocked past its limit (a sleep stands in for a blocked C call: the
    watchdog's thread cannot tell the difference) ends the process, which prints nothing after it."""
    script = textwrap.dedent("""
        import time
        from eosbatch.kafka import watchdog
        watchdog.GRACE_S = 0.2
        with watchdog.bounded("send_offsets_to_transaction", 0.1, "batch 7 of pipeline 'p'"):
            time.sleep(30)
        print("returned")
    """)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == EXIT_TRANSIENT, done
    assert time.monotonic() - started < 20  # ended by the watchdog, not by the end of the sleep
    assert "returned" not in done.stdout
    assert "batch 7 of pipeline 'p': send_offsets_to_transaction still blocked after 0s" in done.stderr, done.stderr
    assert "the lane's lease lapses" in done.stderr
